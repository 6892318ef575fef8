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
from conf.retired import RETIRED, check_overrides, strip_retired
from conf.rundir import REPO_ROOT, config_from_dict
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
    assert _has_field(ExperimentConfig, name.rsplit(".", 1)[0])  # its parent group still exists


@pytest.mark.parametrize("name", sorted(RETIRED))
def test_an_override_of_a_retired_field_names_it(name):
    key = re.escape(name)
    for arg in (f"{name}=1", f"+{name}=1", f"~{name}"):
        with pytest.raises(ValueError, match=rf"^{key}: removed \(.*\); drop the override$"):
            check_overrides([arg])
    with pytest.raises(ValueError, match=rf"^{key}: removed"):
        compose_config("simulate", ["spec.bs=4", f"{name}=1"])
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
    for value in RETIRED[name].accepted:
        data = _recorded(name, value)
        cfg = config_from_dict(data)
        assert cfg.spec.bs == 4
        assert data == _recorded(name, value)  # the caller's dict is left as it was


@pytest.mark.parametrize("name", sorted(RETIRED))
def test_a_recorded_removed_path_is_refused_naming_the_field(name):
    accepted = RETIRED[name].accepted
    other = "shm" if isinstance(accepted[0], str) else (not accepted[0]) if isinstance(accepted[0], bool) else 7
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: removed \(.*holds {re.escape(repr(other))}"):
        strip_retired(_recorded(name, other))


def test_the_shipped_example_runs_still_load():
    paths = sorted((REPO_ROOT / "examples" / "runs").glob("*/*/config.json"))
    assert paths
    for p in paths:
        cfg = config_from_dict(json.loads(p.read_text())["config"])
        cfg.validate()
