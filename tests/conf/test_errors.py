"""Every bad input gets one line naming the field, exit code 2; runs are never lost, mixed up or overwritten.

The leaf test enumerates the schema's leaves (so fields added or removed keep it complete) and feeds each a value of
the wrong type through each entry point's own validation (`conf.cli.entry_config` with the entry's CHECKS, after
Hydra applies the override as a command line would); a few real subprocess runs check the exit code and the shape
of stderr. Then one test per case of issue 52 (docs/ERRORS.md).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from conf.cli import entry_config, error_line
from conf.config_doc import leaves as config_leaves

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def wrong_type_value(t) -> str:
    """A command-line value no field of type `t` accepts."""
    inner = [a for a in typing.get_args(t) if a is not type(None)]
    base = inner[0] if typing.get_origin(t) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and \
        len(inner) == 1 else t
    if base is bool:
        return "maybe"
    if base in (int, float):
        return "not_a_number"
    if base is str:
        return "[1,2]"
    return "not_a_list"  # list fields


LEAVES = [(leaf.name, leaf.hint) for leaf in config_leaves()]  # (dotted name, type), from the schema
_BASE: dict[str, object] = {}


def _entry(name: str):
    if name == "simulate":
        import simulate

        return simulate
    import generate

    return generate


def _composed(entry: str):
    """The entry's default config, composed once per test session."""
    if entry not in _BASE:
        from tests.conftest import compose

        _BASE[entry] = compose(entry)
    return _BASE[entry]


def validate_override(entry: str, override: str) -> str | None:
    """The one line an entry point would print for `override` (None: accepted): Hydra applies the override to the
    composed config as on a command line, then the entry's own validation runs."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = copy.deepcopy(_composed(entry))
    try:
        parsed = OverridesParser.create().parse_overrides([override])
        ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
        entry_config(cfg, *_entry(entry).CHECKS)
    except Exception as e:  # noqa: BLE001 - what the entry point would classify
        line = error_line(e)
        assert line is not None, f"{override}: {type(e).__name__} is not reported as a user error: {e}"
        return line
    return None


def test_the_leaves_are_enumerated_from_the_schema():
    names = [n for n, _ in LEAVES]
    assert "spec.bs" in names and "model.draft.preset" in names and "sim.whatif.runtime_delta" in names
    assert len(names) == len(set(names)) and len(names) > 50


@pytest.mark.parametrize("entry", ["simulate", "generate"])
@pytest.mark.parametrize("leaf", LEAVES, ids=[n for n, _ in LEAVES])
def test_a_bad_value_of_every_leaf_is_one_line_naming_it(entry, leaf):
    name, t = leaf
    line = validate_override(entry, f"{name}={wrong_type_value(t)}")
    assert line is not None and "\n" not in line
    assert name in line, line


@pytest.mark.parametrize("entry", ["simulate", "generate"])
@pytest.mark.parametrize("leaf", LEAVES[::7], ids=[n for n, _ in LEAVES[::7]])
def test_a_misspelt_leaf_names_the_nearest_valid_one(entry, leaf):
    name = leaf[0]
    typo = name + "x"
    for override in (f"{typo}=1", f"+{typo}=1"):
        line = validate_override(entry, override)
        assert line is not None and f"{typo}: no such field" in line and f"did you mean {name}?" in line, line


def _cli(entry: str, *args: str, cwd: Path, env: dict | None = None, timeout: float = 120):
    environ = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    environ.pop("HYDRA_FULL_ERROR", None)
    environ.pop("SWIFTSPEC_DEBUG", None)
    environ.update(env or {})
    return subprocess.run([PY, str(REPO / f"{entry}.py"), *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=timeout)


def _one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ---- case 1 and 7: unknown keys, with or without +; one line, exit 2, no traceback unless asked ---------------------

def test_unknown_key_with_plus_is_one_line_exit_2_and_writes_no_run_dir(tmp_path):
    proc = _cli("simulate", "+spec.bss=2", cwd=tmp_path)
    _one_error_line(proc, "spec.bss", "did you mean spec.bs?")
    assert not (tmp_path / "runs").exists()  # case 3: a run that fails before it starts writes no directory


def test_generate_bad_type_is_one_line_and_debug_shows_the_traceback(tmp_path):
    _one_error_line(_cli("generate", "spec.bs=abc", cwd=tmp_path), "spec.bs")
    debug = _cli("generate", "spec.bs=abc", cwd=tmp_path, env={"SWIFTSPEC_DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr
    assert not (tmp_path / "runs").exists()


def test_hydra_group_options_and_parse_errors_are_one_line():
    for override, needle in (("hardware=h900", "hardware: no option 'h900' (did you mean h800?)"),
                             ("spec.bs=[", "spec.bs=[: not a valid override"),
                             ("+hardware=h800", "hardware")):
        line = validate_override_compose("simulate", override)
        assert line is not None and needle in line and "\n" not in line, line


def validate_override_compose(entry: str, override: str) -> str | None:
    """Like validate_override, through Hydra's full compose (group options, `+group=option` appends)."""
    from tests.conftest import compose

    try:
        entry_config(compose(entry, [override]), *_entry(entry).CHECKS)
    except Exception as e:  # noqa: BLE001
        return error_line(e)
    return None


def test_a_rank_failure_prints_its_root_cause_once():
    exc = RuntimeError("rank 0 (target) failed: CheckpointError: checkpoint x.gguf: truncated\n"
                       "then: rank 1 (draft): RuntimeError: connection closed\n\n--- traceback of rank 0 ---\n"
                       "Traceback")
    assert error_line(exc) == "rank 0 (target) failed: CheckpointError: checkpoint x.gguf: truncated"
    assert error_line(RuntimeError("something else broke")) is None  # a bug keeps its traceback


# ---- case 2: the prompt file is always read; conflicting workload fields -------------------------------------------

def test_prompt_file_replaces_the_demo_prompts_and_a_missing_one_fails(tmp_path):
    from runtime.controller import workload_texts
    from tests.conftest import build

    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "one"}\n{"prompt": "two"}\n{"prompt": "three"}\n')
    assert workload_texts(build("generate", [f"workload.prompt_file={f}"])) == (["one", "two", "three"],
                                                                                 "prompt_file")
    assert workload_texts(build("generate", [f"workload.prompt_file={f}", "workload.num_requests=2"]))[0] == \
        ["one", "two"]
    line = validate_override("generate", "workload.prompt_file=/no/such.jsonl")
    assert line is not None and line.startswith("workload.prompt_file: /no/such.jsonl")
    line = validate_override("generate", "workload.num_requests=3")  # the demo's two prompts
    assert line is not None and line.startswith("workload.num_requests: 3 requests, but workload.prompts holds 2")
    line = validate_override("simulate", f"workload.prompt_file={f}")  # the simulator reads no prompts
    assert line is not None and line.startswith("workload.prompt_file: the simulator reads no prompts")


# ---- case 3: run dirs unique, never overwritten ---------------------------------------------------------------------

SMALL_SIM = ("sim=analytic", "model=tiny", "parallel=1x1", "workload=default", "workload.max_new_tokens=8")


def test_runs_started_together_get_their_own_dirs_and_a_given_dir_is_never_overwritten(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([PY, str(REPO / "simulate.py"), *SMALL_SIM, f"spec={mode}"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for mode in ("serial_tree", "async_tree")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    dirs = sorted((tmp_path / "runs" / "simulate").iterdir())
    assert len(dirs) == 2
    modes = {json.loads((d / "config.json").read_text())["config"]["spec"]["mode"] for d in dirs}
    assert modes == {"serial_tree", "async_tree"}
    for d in dirs:  # each dir agrees with itself: Hydra's record of the overrides and the resolved config
        mode = json.loads((d / "config.json").read_text())["config"]["spec"]["mode"]
        assert f"spec={mode}" in (d / ".hydra" / "overrides.yaml").read_text()
    before = (dirs[0] / "config.json").read_text()
    proc = _cli("simulate", *SMALL_SIM, f"hydra.run.dir={dirs[0]}", cwd=tmp_path)
    _one_error_line(proc, "hydra.run.dir", "already holds a run")
    assert (dirs[0] / "config.json").read_text() == before


# ---- case 4: paths resolve from any working directory ---------------------------------------------------------------

def test_relative_paths_resolve_against_the_repository_from_another_working_directory(tmp_path, monkeypatch):
    from conf.paths import REPO_ROOT, resolve_path

    monkeypatch.chdir(tmp_path)
    assert resolve_path("profiles/h200.json") == REPO_ROOT / "profiles/h200.json"
    (tmp_path / "mine.jsonl").write_text('{"prompt": "x"}\n')
    assert resolve_path("mine.jsonl") == Path("mine.jsonl")  # the working directory's own file first
    from runtime.controller import workload_texts
    from tests.conftest import build

    assert workload_texts(build("generate", ["workload.prompt_file=mine.jsonl"]))[0] == ["x"]


# ---- case 5: acceptance.scale ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", ["1.2", "1.5", "3", "100", "-1", "inf"])
def test_acceptance_scale_beyond_the_table_is_an_error_naming_the_largest(scale):
    line = validate_override("simulate", f"acceptance.scale={scale}")
    assert line is not None and line.startswith("acceptance.scale: "), line
    if 1 < float(scale) < float("inf"):
        assert "the largest valid scale for this table is 1.149" in line
    assert validate_override("simulate", "acceptance.scale=1.14") is None


# ---- case 6: a run that stops early says why, per request -----------------------------------------------------------

def test_stop_reason_names_the_cache_end_eos_and_the_limit():
    from runtime.controller import stop_reason

    assert stop_reason([1] * 1934, 114, 2000, 2048, None) == "max_seq_len"
    assert stop_reason([1, 2, 7], 10, 64, 2048, 7) == "eos"
    assert stop_reason([1] * 64, 10, 64, 2048, 7) == "max_new_tokens"


# ---- case 8: hardware=h800 takes its own link -----------------------------------------------------------------------

def test_every_gpu_preset_names_its_link_and_h800_selects_nvlink4_h800():
    from conf.presets import GPU_PRESETS, LINK_PRESETS
    from tests.conftest import build

    assert all(g.link in LINK_PRESETS for g in GPU_PRESETS.values())
    cfg = build("simulate", ["hardware=h800", "sim=analytic"])
    assert cfg.interconnect.links(cfg.hardware.gpu) == ("nvlink4-h800", "nvlink4-h800")
    cfg = build("simulate", ["hardware=h800", "sim=analytic", "interconnect.intra_group=nvlink4"])
    assert cfg.interconnect.links(cfg.hardware.gpu)[0] == "nvlink4"  # set explicitly: kept


# ---- case 9: workload.eos_token_id is read --------------------------------------------------------------------------

def test_workload_eos_token_id_is_read_and_checked():
    from runtime.controller import load_workload
    from tests.conftest import build

    cfg = build("generate", ["model=tiny", "workload=default", "workload.eos_token_id=5"])
    assert load_workload(cfg)[1] == 5
    line = validate_override("generate", "workload.eos_token_id=999999")
    assert line is not None and line.startswith("workload.eos_token_id: 999999 is not a token")


# ---- case 10: labels say what a number is ---------------------------------------------------------------------------

def test_the_simulator_summary_labels_simulated_time():
    from simulator.metrics import summary_table

    metrics = {k: 1.0 for k in ("tokens_per_s", "time_per_output_token_s", "wall_s", "iteration_time_s",
                                "verify_time_s", "expand_time_s", "mean_accept_len", "hit_rate")}
    metrics.update(mode="async_tree", model="m", target_gpus=1, draft_gpus=1, gpu="h200", interconnect="nvlink",
                   bs=8, w=8, d=2, gamma=4, cost_model="analytic", generated_tokens=8, iterations=2,
                   busy_fraction={"target": 1.0, "draft": 0.5})
    table = summary_table(metrics)
    assert "simulated time (s)" in table and "wall" not in table
