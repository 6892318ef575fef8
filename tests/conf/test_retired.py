"""Removed config fields (conf/retired.py): gone from the schema, refused as overrides with one line naming them,
dropped from recorded configs that hold what the code still runs, refused where a recorded run took a removed path."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from conf import compose_config
from conf.retired import MOVED, RETIRED, _owner, check_overrides, strip_retired
from conf.rundir import MEASURED_DIR, REPO_ROOT, config_from_dict
from conf.schema import ExperimentConfig


def _has_field(cls: type, dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    f = {f.name: f for f in dataclasses.fields(cls)}.get(head)
    if f is None:
        return False
    if not rest:
        return True
    sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
    return sub is not None and dataclasses.is_dataclass(sub) and _has_field(type(sub), rest)


@pytest.mark.parametrize("name", sorted(RETIRED))
def test_a_retired_field_is_not_in_the_schema(name):
    assert not _has_field(ExperimentConfig, name)
    parent = name.rsplit(".", 1)[0]
    assert _has_field(ExperimentConfig, parent) or parent in MOVED  # its parent group still exists, or moved


@pytest.mark.parametrize("name", sorted(RETIRED))
def test_an_override_of_a_retired_field_names_it(name):
    key = re.escape(name)
    instead = (f"replaced by {re.escape(RETIRED[name].replacement)}" if RETIRED[name].replacement
               else "drop the override")
    for arg in (f"{name}=1", f"+{name}=1", f"~{name}"):
        with pytest.raises(ValueError, match=rf"^{key}: removed \(.*\); {instead}$"):
            check_overrides([arg])
    with pytest.raises(ValueError, match=rf"^{key}: removed"):
        compose_config("simulate", ["spec.bs=4", f"{name}=1"])
    if _owner(name, MOVED) is None:
        check_overrides([f"{name}_x=1", "spec.bs=4"])  # other keys pass


def test_the_entry_point_refuses_a_retired_override_in_one_line():
    name = next(iter(RETIRED))
    done = subprocess.run([sys.executable, "simulate.py", f"{name}=true"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"error: {name}: removed ({RETIRED[name].why}; docs/LOG.md); "
                                                "drop the override"]


def _recorded(name: str, value) -> dict:
    data: dict = {"spec": {"bs": 4}}
    node = data
    *parents, leaf = name.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return data


@pytest.mark.parametrize("name", sorted(RETIRED))
def test_a_recorded_config_loads_without_its_retired_fields(name):
    for value in RETIRED[name].accepted or (7, 3.5e-4, "any"):  # None: any recorded value
        data = _recorded(name, value)
        cfg = config_from_dict(data)
        assert cfg.spec.bs == 4
        assert data == _recorded(name, value)  # the caller's dict is left as it was


@pytest.mark.parametrize("name", sorted(RETIRED))
def test_a_recorded_removed_path_is_refused_naming_the_field(name):
    accepted = RETIRED[name].accepted
    if accepted is None:
        pytest.skip("any recorded value loads")
    other = "shm" if isinstance(accepted[0], str) else (not accepted[0]) if isinstance(accepted[0], bool) else 7
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: removed \(.*holds {re.escape(repr(other))}"):
        strip_retired(_recorded(name, other))


def test_the_shipped_example_runs_still_load():
    paths = sorted((REPO_ROOT / "examples" / "runs").glob("*/*/config.json"))
    assert paths
    for p in paths:
        cfg = config_from_dict(json.loads(p.read_text())["config"])
        cfg.validate()


@pytest.mark.parametrize("name", sorted(MOVED))
def test_an_override_of_a_moved_field_names_its_new_place(name):
    new = MOVED[name].to
    assert not _has_field(ExperimentConfig, name) and _has_field(ExperimentConfig, new)
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: moved to {re.escape(new)}$"):
        check_overrides([f"{name}=1"])
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: moved to {re.escape(new)}$"):
        compose_config("simulate", [f"{name}=1"])


def test_an_override_of_a_runtime_delta_names_the_mapping_key():
    new = re.escape("sim.whatif.runtime_delta.step_extra_s")
    with pytest.raises(ValueError, match=rf"^sim\.runtime_delta\.step_extra_s: moved to {new}; write \+{new}=\.\.\. "
                       r"for a key of a mapping$"):
        check_overrides(["sim.runtime_delta.step_extra_s=-5e-5"])
    cfg = compose_config("simulate", ["+sim.whatif.runtime_delta.step_extra_s=-5e-5"])
    assert cfg.sim.whatif.runtime_delta == {"step_extra_s": -5e-5}


def test_a_recorded_config_maps_its_moved_what_ifs():
    """Recorded sim.draft_host_scale / draft_device_scale / runtime_delta.* (11 fields then) load into sim.whatif; the
    zero deltas (what the profile as fitted prices) are dropped, a nonzero one kept under its key."""
    deltas = {"step_extra_s": 0.0, "keep_s": 0.0, "draft_round_s": 1e-4, "colocated_step_extra_s": 0.0}
    data = {"sim": {"draft_host_scale": 0.5, "draft_device_scale": 0.6, "runtime_delta": deltas,
                    "tree_op_s": 8.6e-5, "record_events": False}}
    cfg = config_from_dict(data)
    assert (cfg.sim.whatif.draft_host_scale, cfg.sim.whatif.draft_device_scale) == (0.5, 0.6)
    assert cfg.sim.whatif.runtime_delta == {"draft_round_s": 1e-4}
    assert data["sim"]["runtime_delta"] == deltas  # the caller's dict is left as it was
    zeros = config_from_dict({"sim": {"runtime_delta": {k: 0.0 for k in ("step_extra_s", "keep_s")}}})
    assert zeros.sim.whatif == ExperimentConfig().sim.whatif


def test_the_measured_runs_still_load():
    """Every recorded config under data/measured (the validation replays read them) loads and validates."""
    paths = sorted(MEASURED_DIR.rglob("config.json"))
    assert paths
    for p in paths:
        cfg = config_from_dict(json.loads(p.read_text())["config"])
        cfg.validate()
