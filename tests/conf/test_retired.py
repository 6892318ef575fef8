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
from conf.retired import MOVED, REPLACED, RETIRED, _owner, check_overrides, strip_retired
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
    other = other if other not in accepted else 7  # a switch whose both values were recorded
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: removed \(.*holds {re.escape(repr(other))}"):
        strip_retired(_recorded(name, other))


def test_the_shipped_example_runs_still_load():
    paths = sorted((REPO_ROOT / "examples" / "runs").glob("*/*/config.json"))
    assert paths
    for p in paths:
        cfg = config_from_dict(json.loads(p.read_text())["config"])
        cfg.validate()


@pytest.mark.parametrize("name", sorted(REPLACED))
def test_an_override_of_a_replaced_key_names_its_replacement(name):
    args = [name] if "=" in name else [f"{name}=true", f"+{name}=1", f"~{name}"]
    for arg in args:
        line = rf"^{re.escape(name)}: now {re.escape(REPLACED[name])} \(docs/CONFIG.md\)$"
        with pytest.raises(ValueError, match=line):
            check_overrides([arg])
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: now "):
        compose_config("simulate", ["spec.bs=4", args[0]])


def test_old_kernels_overrides_name_the_preset_and_ablation():
    for arg, line in [
        ("kernels.skinny=false",
         "kernels.skinny: now kernels=graphs with kernels.ablate=[skinny,target_qkv_rope] (docs/CONFIG.md)"),
        ("kernels.prefill_graph=false",
         "kernels.prefill_graph: now kernels=graphs with kernels.ablate=[prefill_graph] (docs/CONFIG.md)"),
        ("kernels=triton_graphs", "kernels=triton_graphs: now kernels=graphs (the fused GEMM + all-reduce: the "
                                  "simulator what-if sim.whatif.fused_allreduce=true) (docs/CONFIG.md)"),
        ("kernels.pdl_policy.norm=late", f"kernels.pdl_policy.norm: removed ({RETIRED['kernels.pdl_policy'].why}; "
                                         "docs/LOG.md); drop the override"),
    ]:
        with pytest.raises(ValueError) as e:
            check_overrides(["spec.bs=4", arg])
        assert str(e.value) == line
    check_overrides(["kernels=graphs", "kernels.ablate=[skinny,target_qkv_rope]", "kernels=triton"])


def test_the_entry_point_refuses_triton_graphs_naming_graphs():
    done = subprocess.run([sys.executable, "simulate.py", "kernels=triton_graphs"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    replacement = REPLACED["kernels=triton_graphs"]
    assert done.stderr.strip().splitlines() == [f"error: kernels=triton_graphs: now {replacement} (docs/CONFIG.md)"]


_OLD_OFF = {"backend": "triton", "cuda_graphs": True, "fused_allreduce": False, "skinny": True, "pdl": True,
            "pdl_policy": {"gemm": "default", "small": "default", "pre_attention": "default", "norm": "default"},
            "rope_attention": True, "target_qkv_rope": True, "draft_head": True, "refill_graph": True,
            "prefill_graph": True, "input_staging": "graph", "readback": "spin", "verdict_graph": False}
"""An older run's kernels object as config.json recorded it under kernels=graphs."""


@pytest.mark.parametrize("changes,preset,ablate", [
    ({}, "graphs", []),
    ({"fused_allreduce": True}, "graphs", []),  # kernels=triton_graphs: simulated, priced as graphs
    ({"prefill_graph": False}, "graphs", ["prefill_graph"]),
    ({"skinny": False, "target_qkv_rope": False, "pdl": False}, "graphs", ["skinny", "pdl", "target_qkv_rope"]),
    ({"cuda_graphs": False, "refill_graph": False, "prefill_graph": False}, "graphs",
     ["cuda_graphs", "refill_graph", "prefill_graph"]),
    ({name: False for name in ("cuda_graphs", "skinny", "pdl", "rope_attention", "target_qkv_rope", "draft_head",
                               "refill_graph", "prefill_graph")}, "triton", []),
    ({"backend": "reference", **{name: False for name in ("cuda_graphs", "skinny", "pdl", "rope_attention",
                                                          "target_qkv_rope", "draft_head", "refill_graph",
                                                          "prefill_graph")}}, "reference", []),
])
def test_an_old_recorded_kernels_object_maps_to_its_preset_and_ablation(changes, preset, ablate):
    """The switches of an older run map to one preset minus an ablation list, whose features are those switches."""
    old = {**_OLD_OFF, **changes}
    cfg = config_from_dict({"kernels": old})
    cfg.kernels.validate()
    assert (cfg.kernels.preset, cfg.kernels.ablate) == (preset, ablate)
    for name in ("backend", "cuda_graphs", "skinny", "pdl", "rope_attention", "target_qkv_rope", "draft_head",
                 "refill_graph", "prefill_graph"):
        assert getattr(cfg.kernels, name) == old[name], name
    again = config_from_dict(json.loads(json.dumps(dataclasses.asdict(cfg))))  # a new run dir's config.json
    assert (again.kernels.preset, again.kernels.ablate) == (preset, ablate)


def test_a_switch_missing_from_an_old_record_was_off():
    cfg = config_from_dict({"kernels": {"backend": "triton", "cuda_graphs": True, "fused_allreduce": False}})
    assert cfg.kernels.preset == "graphs" and cfg.kernels.ablate == [
        "skinny", "pdl", "rope_attention", "target_qkv_rope", "draft_head", "refill_graph", "prefill_graph"]
    assert config_from_dict({"kernels": {"backend": "triton"}}).kernels.preset == "triton"


@pytest.mark.parametrize("changes", [
    {"backend": "reference"},  # graph features on the reference backend
    {"skinny": False},  # target_qkv_rope without skinny
    {"backend": "cuda"},
    {"pdl_policy": {"gemm": "off", "small": "default", "pre_attention": "default", "norm": "default"}},
])
def test_a_recorded_kernels_combination_no_preset_has_is_refused_naming_it(changes):
    with pytest.raises(ValueError, match=r"^kernels(\.pdl_policy)?: "):
        config_from_dict({"kernels": {**_OLD_OFF, **changes}})


def test_a_measured_runs_config_loads_with_its_preset_and_ablation():
    """data/measured runs recorded before the presets: 954a1bf's predate prefill graphs (graphs minus
    prefill_graph), e92dbf1's predate every switch but CUDA graphs."""
    measured = REPO_ROOT / "data" / "measured"
    for folder, ablate in [("runtime_runs_2026-12-01_954a1bf/ar", ["prefill_graph"]),
                           ("runtime_runs_2026-12-01_5fa8232_colocated/small_chain", []),
                           ("runtime_runs_2026-11-30_e92dbf1", ["skinny", "pdl", "rope_attention", "target_qkv_rope",
                                                                "draft_head", "refill_graph", "prefill_graph"])]:
        path = measured / folder / "config.json"
        if not path.exists():
            path = next((measured / folder).glob("*/config.json"))
        cfg = config_from_dict(json.loads(path.read_text())["config"])
        cfg.validate()
        assert (cfg.kernels.preset, cfg.kernels.ablate) == ("graphs", ablate), folder


@pytest.mark.parametrize("name", sorted(REPLACED))
def test_a_replaced_keys_replacement_composes(name):
    """Every `kernels=... with kernels.ablate=[...]` replacement REPLACED names is itself a valid config."""
    words = REPLACED[name].split()
    overrides = [w for w in words if w.startswith(("kernels=", "kernels.ablate="))]
    assert overrides, REPLACED[name]
    for override in overrides:
        compose_config("simulate", [override] if override.startswith("kernels=") else ["kernels=graphs", override])


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


def test_recorded_overrides_of_retired_fields_at_their_kept_value_are_dropped():
    """A benchmark result's experiment overrides replayed today: `spec.oracle_belief=table` (and `false` / `null`
    spelled the YAML way for the kept values) go; a value the code no longer runs stays, so replaying it fails."""
    from conf.retired import drop_retired_overrides

    kept = ["acceptance=smollm2", "spec.oracle_belief=table", "trace.per_operator=false",
            "parallel.recv_spin_ms=null", "sim.step_overhead_s=3e-5", "spec.presend=true"]
    assert drop_retired_overrides(kept) == ["acceptance=smollm2", "spec.presend=true"]
