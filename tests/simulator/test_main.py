"""simulator.main.run: run dir contents, the metrics contract, bad configs; autoconfig ranking."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest

from conf.rundir import REPO_ROOT as REPO
from conf.rundir import read_run
from conf.trace import read_traces
from simulator.autoconfig import search
from simulator.main import run
from tests.conftest import build
from tests.simulator.conftest import cfg

CONTRACT = ["source", "mode", "model", "target_gpus", "draft_gpus", "bs", "w", "d", "gamma", "interconnect", "gpu",
            "acceptance_scale", "oracle", "num_requests", "generated_tokens", "wall_s", "tokens_per_s",
            "time_per_output_token_s", "iterations", "iteration_time_s", "verify_time_s", "expand_time_s",
            "mean_accept_len", "accept_len_hist", "hit_rate", "busy_fraction"]
SMALL = ("workload.num_requests=2", "workload.max_new_tokens=64")


def test_run_writes_the_run_dir_and_prints_one_final_json_line(tmp_path, capsys):
    config = cfg(*SMALL)
    metrics = run(config, tmp_path, command="simulate.py test")
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == metrics
    assert "tokens/s" in "\n".join(out[:-1])
    assert list(metrics)[: len(CONTRACT)] == CONTRACT
    assert metrics["source"] == "sim" and metrics["oracle"] is False and metrics["mode"] == "async_tree"
    assert metrics["d"] >= 1 and 0.0 <= metrics["hit_rate"] <= 1.0
    back = read_run(tmp_path)
    assert back["metrics"] == metrics
    assert back["meta"]["device"] == "sim:h200" and back["meta"]["seed"] == 0
    assert back["config"]["spec"]["mode"] == "async_tree"
    with open(tmp_path / "iterations.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == metrics["iterations"]
    assert list(rows[0]) == ["request", "iteration", "start_s", "end_s", "verify_s", "expand_s", "reroot_s",
                             "message_s", "target_idle_s", "draft_idle_s", "accepted", "emitted", "hit", "ranks",
                             "refills"]
    assert {r["ranks"] for r in rows} == {""}  # the runtime's recorded draft ranks; the simulator leaves it empty
    assert sum(int(r["emitted"]) for r in rows) >= metrics["generated_tokens"]  # emitted: before the stop cap
    assert sum(int(r["accepted"]) + 1 for r in rows) == sum(int(r["emitted"]) for r in rows)
    traces = read_traces(tmp_path / "traces.jsonl")
    names = {(t.name, t.group) for t in traces}
    assert {("step.verify", "target"), ("step.expand", "draft"), ("step.reroot", "draft"),
            ("msg.proposal", "link"), ("msg.verified", "link")} <= names
    chrome = json.loads((tmp_path / "chrome_trace.json").read_text())
    assert len(chrome["traceEvents"]) == len(traces)


@pytest.mark.parametrize("mode,hit_rate_is_none", [("autoregressive", True), ("chain", True),
                                                   ("serial_tree", False)])
def test_every_mode_runs_through_main(tmp_path, mode, hit_rate_is_none):
    metrics = run(cfg(*SMALL, f"spec={mode}"), tmp_path, verbose=False)
    assert metrics["mode"] == mode and metrics["generated_tokens"] == 128
    assert (metrics["hit_rate"] is None) == hit_rate_is_none


@pytest.mark.parametrize("overrides,match", [
    (["model=smollm2", "parallel.target_gpus=4", "parallel.draft_gpus=4"],
     r"parallel\.draft_gpus: TP degree 4 cannot shard smollm2-draft"),
    (["acceptance.positional=[[1.5]]"], r"acceptance\.positional\[0\]\[0\]: 1\.5 is outside \[0, 1\]"),
    (["acceptance.positional=[[0.7,0.5]]"], r"acceptance\.positional\[0\]: probabilities sum to 1\.2000 > 1"),
    (["hardware.gpu=tpu9"], r"hardware\.gpu: unknown preset 'tpu9'"),
], ids=["tp-shape", "acceptance-range", "acceptance-sum", "unknown-gpu"])
def test_conf_layer_rejects_bad_configs(overrides, match):
    with pytest.raises(ValueError, match=match):
        build("simulate", overrides)


@pytest.mark.parametrize("overrides,match", [
    (["parallel.target_gpus=4", "parallel.draft_gpus=8"],
     r"parallel\.draft_gpus: the draft group \(ranks 4\.\.11\) spans nodes 0\.\.1"),
    (["parallel.target_gpus=8", "parallel.draft_gpus=2"],
     r"interconnect\.cross_group: the draft and target leaders sit on different nodes"),
    (["parallel.target_gpus=1", "parallel.draft_gpus=1"],
     r"parallel\.target_gpus: llama3-70b needs .* GiB per GPU at TP 1 .* more than the h200's"),
    (["model=smollm2", "spec=chain", "parallel.target_gpus=4", "parallel.draft_gpus=0"],
     r"parallel\.target_gpus \(the draft shares the target's GPUs at draft_gpus=0\): TP degree 4 cannot shard"),
    (["sim.profile=profiles/does-not-exist.json"], r"sim\.profile: profile file .* does not exist"),
], ids=["group-spans-nodes", "cross-node-needs-ib", "memory", "shared-draft-tp", "missing-profile"])
def test_simulator_rejects_configs_conf_cannot_judge(tmp_path, overrides, match):
    config = build("simulate", [*SMALL, *overrides])
    with pytest.raises(ValueError, match=match):
        run(config, tmp_path, verbose=False)


def test_cross_node_split_runs_with_an_inter_node_link(tmp_path):
    config = cfg(*SMALL, "parallel.target_gpus=8", "parallel.draft_gpus=8",
                 "interconnect=cross_node_ib")
    nvlink = run(cfg(*SMALL, "parallel=4x4"), tmp_path / "a", verbose=False)
    ib = run(config, tmp_path / "b", verbose=False)
    assert ib["interconnect"] == "cross_node_ib" and ib["tokens_per_s"] > 0
    assert nvlink["tokens_per_s"] > 0


def test_autoconfig_ranks_candidates_and_reports_skipped_splits():
    config = cfg("workload.num_requests=1", "workload.max_new_tokens=64")
    ranked = search(config, splits=[1, 4, 6], bs_values=(8,), w_values=(4, 8), d_values=("auto", "2"))
    ok = [c for c in ranked if not c.error]
    assert len(ok) == 8 and len(ranked) == 12
    assert [c.tokens_per_s for c in ok] == sorted((c.tokens_per_s for c in ok), reverse=True)
    assert all("needs" in c.error for c in ranked if c.error)  # 70B does not fit one GPU at 16 bits
    assert all(c.d_used >= 1 for c in ok)


def test_autoconfig_cli_searches_the_given_widths(capsys):
    """`python -m simulator.autoconfig --bs 8 --w 24,32`: only those values are searched (d auto and 1..8 each);
    a bad list is refused naming its flag."""
    from simulator import autoconfig

    args = ["model=llama3-8b_llama3.2-1b", "parallel=1x1", "workload.num_requests=1", "workload.max_new_tokens=32"]
    ranked = autoconfig.main([*args, "--bs", "8", "--w", "24,32", "--top", "3"])
    assert {(c.bs, c.w) for c in ranked} == {(8, 24), (8, 32)} and len(ranked) == 2 * len(autoconfig.D_VALUES)
    assert not any(c.error for c in ranked)
    assert len(json.loads(capsys.readouterr().out.splitlines()[-1])["ranked"]) == 3
    with pytest.raises(SystemExit, match=r"autoconfig: --w expects positive integers separated by commas, got '8,x'"):
        autoconfig.main([*args, "--w", "8,x"])
    with pytest.raises(SystemExit, match="autoconfig: --bs needs a value"):
        autoconfig.main([*args, "--bs"])
    with pytest.raises(SystemExit, match="autoconfig: --top expects one positive integer, got '3,5'"):
        autoconfig.main([*args, "--top", "3,5"])
    with pytest.raises(SystemExit, match="autoconfig: unknown option '--width'"):
        autoconfig.main([*args, "--width", "8"])


def test_autoconfig_cli_help_prints_its_usage(capsys):
    from simulator import autoconfig

    with pytest.raises(SystemExit) as exit_info:
        autoconfig.main(["--help"])
    assert exit_info.value.code == 0
    assert "python -m simulator.autoconfig" in capsys.readouterr().out


def test_replaying_a_recorded_chain_run_reproduces_its_accepted_lengths(tmp_path):
    recorded = run(cfg(*SMALL, "spec=chain"), tmp_path / "rec", verbose=False)
    replay = run(build("simulate", [*SMALL, "spec=chain", "acceptance.kind=replay",
                                    f"acceptance.file={tmp_path / 'rec' / 'iterations.csv'}"]),
                 tmp_path / "replay", verbose=False)

    def accepted(path):
        with open(path / "iterations.csv") as f:
            return [int(r["accepted"]) for r in csv.DictReader(f)]

    assert accepted(tmp_path / "replay") == accepted(tmp_path / "rec")
    assert replay["accept_len_hist"] == recorded["accept_len_hist"]


def test_iteration_columns_are_the_documented_contract():
    """iterations.csv has one column list (conf.rundir.ITERATION_COLUMNS), which both writers import, and it is the
    list docs/CONTRACTS.md documents, in order."""
    import re

    from conf.rundir import ITERATION_COLUMNS
    from simulator import records

    assert records.ITERATION_COLUMNS is ITERATION_COLUMNS
    # the simulator's row holds every column but the runtime's `ranks`, and writes them in the contract's order
    fields = {f.name for f in dataclasses.fields(records.IterationRow)}
    assert fields == set(ITERATION_COLUMNS) - {"ranks"}
    row = records.IterationRow(0, 0, 0.0, 1.0, 1.0, 0.0, 0.0, 0, 1)
    assert tuple(row.to_dict()) == ITERATION_COLUMNS
    text = " ".join((REPO / "docs" / "CONTRACTS.md").read_text().split())
    documented = re.search(r"iterations\.csv: ([a-z_, ]+)\.", text)
    assert documented is not None, "docs/CONTRACTS.md: no 'iterations.csv: <columns>.' line"
    assert tuple(c.strip() for c in documented.group(1).split(",")) == ITERATION_COLUMNS
