"""generate.py end to end (subprocess, tiny random model, 1 + 1 ranks), and the metrics / run-dir helpers
(runtime/metrics.py) it relies on, with hand-computed expectations."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conf.rundir import read_run
from conf.schema import ExperimentConfig, SpecConfig, WorkloadConfig, freeze
from conf.trace import read_traces
from generate import check_prompt_source, output_texts, strip_launcher_args
from runtime.metrics import ITERATION_COLUMNS, METRIC_KEYS, Progress, Timeline, summarize, write_run_dir

REPO = Path(__file__).resolve().parents[2]


def test_generate_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "generate.py", "model=tiny", "parallel=1x1", "spec=async_tree", "workload=default",
           "workload.max_new_tokens=8", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    metrics = json.loads(last)  # the final line is the metrics JSON
    assert set(METRIC_KEYS) <= set(metrics)
    assert metrics["source"] == "runtime" and metrics["mode"] == "async_tree" and metrics["generated_tokens"] == 8
    assert (metrics["target_gpus"], metrics["draft_gpus"]) == (1, 1)
    assert "--- request 0: 32 prompt tokens -> 8 generated (token ids; stopped: max_new_tokens) ---" in proc.stdout

    run = read_run(run_dir)
    assert run["metrics"] == metrics
    assert run["meta"]["git_sha"] and run["meta"]["seed"] == 0 and run["meta"]["oracle"] is False
    assert run["config"]["parallel"]["target_gpus"] == 1 and run["config"]["spec"]["mode"] == "async_tree"
    traces = read_traces(run_dir / "traces.jsonl")
    assert {r.rank for r in traces} == {0, 1}  # both ranks' spans were merged on rank 0
    assert {"step.verify", "step.expand", "comm.send", "comm.recv"} <= {r.name for r in traces}
    expands = [r for r in traces if r.name == "step.expand"]  # each records its real rows (1..w): the first
    rows = [r.extra_fields()["rows"] for r in sorted(expands, key=lambda r: r.start_s)]  # expands the root alone
    assert rows[0] == 1 and all(1 <= n <= r.tokens for n, r in zip(rows, expands))
    chrome = json.loads((run_dir / "chrome_trace.json").read_text())
    assert len(chrome["traceEvents"]) == len(traces)
    with open(run_dir / "iterations.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0].keys()) == ITERATION_COLUMNS and len(rows) == metrics["iterations"]
    assert sum(int(r["emitted"]) for r in rows) >= 8
    # outputs.jsonl: the ids printed (no tokenizer: no text), the stop rule; every file readable by others; no log
    outputs = [json.loads(line) for line in (run_dir / "outputs.jsonl").read_text().splitlines()]
    header = "--- request 0: 32 prompt tokens -> 8 generated (token ids; stopped: max_new_tokens) ---\n"
    printed = proc.stdout.split(header)[1].splitlines()[0]
    assert [o["request"] for o in outputs] == list(range(metrics["num_requests"])) and outputs[0]["prompt_tokens"] == 32
    assert " ".join(map(str, outputs[0]["tokens"])) == printed and len(outputs[0]["tokens"]) == 8
    assert outputs[0]["text"] is None and outputs[0]["stop"] == "max_new_tokens"
    assert all((p.stat().st_mode & 0o777) == 0o644 for p in run_dir.iterdir() if p.is_file())
    assert not list(run_dir.glob("*.log"))

    # runtime.rebuild_iterations: a run dir from before a column (here `refills`) gains it from its traces; a file
    # whose other cells the traces do not give back is left as it was, the error naming the row and column
    from runtime.rebuild_iterations import RebuildError, main, rebuild

    text = (run_dir / "iterations.csv").read_text()
    old = [",".join(line.split(",")[:-1]) for line in text.splitlines()]  # without the last column, refills
    (run_dir / "iterations.csv").write_text("\n".join(old) + "\n")
    assert main([str(run_dir)]) == 0 and (run_dir / "iterations.csv").read_text() == text
    cells = old[1].split(",")
    cells[ITERATION_COLUMNS.index("accepted")] = "99"
    bad = old[:1] + [",".join(cells)] + old[2:]  # the first row's `accepted` changed
    (run_dir / "iterations.csv").write_text("\n".join(bad) + "\n")
    with pytest.raises(RebuildError, match=r"iterations.csv:2: column 'accepted' is '99'"):
        rebuild(run_dir)
    assert (run_dir / "iterations.csv").read_text() == "\n".join(bad) + "\n"


def test_generate_tiny_keeps_the_printed_text_and_tokens(tmp_path):
    """`python generate.py model=tiny` (the demo's text prompts, byte tokenizer): outputs.jsonl holds per request the
    prompt size, the generated ids and the text it printed, and why it stopped."""
    from runtime.tokenizer import ByteTokenizer

    run_dir = tmp_path / "run"
    cmd = [sys.executable, "generate.py", "model=tiny", "workload.max_new_tokens=6", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = [json.loads(line) for line in (run_dir / "outputs.jsonl").read_text().splitlines()]
    assert len(outputs) == 2
    for o in outputs:
        header = (f"--- request {o['request']}: {o['prompt_tokens']} prompt tokens -> {len(o['tokens'])} generated "
                  f"(bytes; stopped: {o['stop']}) ---")
        assert f"{header}\n{o['text']}\n" in proc.stdout
        assert o["text"] == ByteTokenizer().decode(o["tokens"]) and o["stop"] in ("eos", "max_new_tokens")
        assert len(o["tokens"]) == 6 or o["stop"] == "eos"
    assert not list(run_dir.glob("*.log"))


def test_stop_reason_names_the_rule_that_ended_a_request():
    from runtime.controller import Emitter, stop_reason

    for prompt, new, cap, eos, stream, want in (([1] * 4, 5, 64, 9, [3, 9, 7], "eos"),
                                                ([1] * 4, 3, 64, 9, [3, 4, 5, 6], "max_new_tokens"),
                                                ([1] * 4, 8, 6, None, [3, 4, 5, 6], "max_seq_len")):
        em = Emitter(prompt, new, cap, eos)
        assert em.emit(stream)
        assert stop_reason(em.tokens, len(prompt), new, cap, eos) == want
    with pytest.raises(ValueError, match="meet no stop rule"):
        stop_reason([3], 4, 8, 64, None)


def test_strip_launcher_args():
    assert strip_launcher_args(["generate.py", "--local_rank=3", "model=tiny"]) == ["generate.py", "model=tiny"]
    assert strip_launcher_args(["generate.py", "--local_rank", "1", "a=b"]) == ["generate.py", "a=b"]
    assert strip_launcher_args(["generate.py", "--local-rank=0"]) == ["generate.py"]


def test_default_workload_is_two_real_text_prompts():
    """`python generate.py` decodes real text (code and prose); workload=default gives random-token prompts."""
    from tests.conftest import build

    wl = build("generate").workload
    assert len(wl.prompts) == 2 and wl.prompts[0].startswith("def merge_sorted") and wl.max_new_tokens == 64
    assert build("generate", ["workload=default"]).workload.prompts == []


def test_prompt_file_is_checked_before_launch(tmp_path):
    missing = freeze(ExperimentConfig(workload=WorkloadConfig(prompt_file=str(tmp_path / "none.jsonl"))))
    with pytest.raises(ValueError, match="workload.prompt_file: .*none.jsonl: cannot be read"):
        check_prompt_source(missing)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n\n{"text": "no prompt key"}\n')
    with pytest.raises(ValueError, match=r'bad.jsonl:3 needs a string "prompt" field'):
        check_prompt_source(freeze(ExperimentConfig(workload=WorkloadConfig(prompt_file=str(bad)))))


def test_output_texts_bytes_for_text_prompts_ids_otherwise():
    text_cfg = freeze(ExperimentConfig(workload=WorkloadConfig(prompts=["hi"])))
    assert output_texts(text_cfg, [[104, 105]]) == (["hi"], "bytes")
    assert output_texts(freeze(ExperimentConfig()), [[7, 300]]) == (["7 300"], "token ids")


ROWS = [  # three verify steps, written by hand
    {"request": 0, "iteration": 0, "start_s": 0.0, "end_s": 0.1, "verify_s": 0.04, "expand_s": 0.02,
     "reroot_s": 0.01, "message_s": 0.001, "target_idle_s": 0.05, "draft_idle_s": 0.0, "accepted": 2,
     "emitted": 3, "hit": True},
    {"request": 0, "iteration": 1, "start_s": 0.1, "end_s": 0.3, "verify_s": 0.06, "expand_s": 0.04,
     "reroot_s": 0.01, "message_s": 0.001, "target_idle_s": 0.1, "draft_idle_s": 0.0, "accepted": 0,
     "emitted": 1, "hit": False},
    {"request": 0, "iteration": 2, "start_s": 0.3, "end_s": 0.4, "verify_s": 0.05, "expand_s": 0.0,
     "reroot_s": 0.02, "message_s": 0.001, "target_idle_s": 0.0, "draft_idle_s": 0.0, "accepted": 2,
     "emitted": 3, "hit": True},
]


def test_summarize_from_hand_built_rows():
    cfg = freeze(ExperimentConfig(spec=SpecConfig(mode="async_tree", bs=8, w=4, d="3")))
    m = summarize(cfg, ROWS, generated_tokens=7, wall_s=0.5, gpu="cpu", prefill_s=0.01)
    assert list(m)[: len(METRIC_KEYS)] == list(METRIC_KEYS) and m["prefill_s"] == 0.01
    assert (m["source"], m["mode"], m["bs"], m["w"], m["d"], m["gpu"]) == ("runtime", "async_tree", 8, 4, 3, "cpu")
    assert m["tokens_per_s"] == pytest.approx(14.0) and m["time_per_output_token_s"] == pytest.approx(0.5 / 7)
    assert m["iterations"] == 3 and m["iteration_time_s"] == pytest.approx(0.4 / 3)
    assert m["verify_time_s"] == pytest.approx(0.05) and m["expand_time_s"] == pytest.approx(0.02)
    assert m["mean_accept_len"] == pytest.approx(7 / 3) and m["accept_len_hist"] == {"1": 1, "3": 2}
    assert m["hit_rate"] == pytest.approx(2 / 3)
    assert m["busy_fraction"]["target"] == pytest.approx(0.15 / 0.5)
    assert m["busy_fraction"]["draft"] == pytest.approx((0.06 + 0.04) / 0.5)
    json.dumps(m)  # serialisable as the final JSON line
    ar = summarize(freeze(ExperimentConfig(spec=SpecConfig(mode="autoregressive"))),
                   [{**r, "hit": ""} for r in ROWS[:1]], 1, 0.1)
    assert ar["hit_rate"] is None and ar["d"] == "auto"
    empty = summarize(cfg, [], 0, 0.0)
    assert empty["tokens_per_s"] is None and empty["mean_accept_len"] is None and empty["accept_len_hist"] == {}


def test_timeline_records_and_run_dir(tmp_path):
    tl = Timeline("run-x", rank=2, group="draft", tp=1)
    with tl.span("step.expand", iteration=4, tokens=8, extra={"phase": "overlap"}):
        pass
    tl.add("comm.send", 0.0, 1e-4, iteration=4, extra={"bytes": 96})
    recs = tl.records()
    assert [r.name for r in recs] == ["comm.send", "step.expand"]  # sorted by start
    assert recs[1].rank == 2 and recs[1].group == "draft" and recs[1].iteration == 4 and recs[1].tokens == 8
    assert json.loads(recs[1].extra) == {"phase": "overlap"} and recs[1].start_s >= 0 and recs[1].device == "cpu"
    off = Timeline("run-x", enabled=False)
    with off.span("step.verify"):
        off.add("comm.recv", 0.0, 1.0)
    assert off.records() == []

    cfg = freeze(ExperimentConfig())
    write_run_dir(tmp_path, cfg, {"git_sha": "abc", "seed": 0}, {"tokens_per_s": 1.0}, ROWS, tl)
    assert read_traces(tmp_path / "traces.jsonl") == recs
    assert json.loads((tmp_path / "chrome_trace.json").read_text())["traceEvents"][0]["name"] == "comm.send"
    with open(tmp_path / "iterations.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["emitted"] for r in rows] == ["3", "1", "3"] and rows[1]["hit"] == "0"
    write_run_dir(tmp_path / "empty", cfg, {"seed": 0}, {})
    assert (tmp_path / "empty" / "iterations.csv").read_text() == ",".join(ITERATION_COLUMNS) + "\n"


def test_progress_is_throttled_and_rank_aware():
    out = io.StringIO()
    p = Progress(100, stream=out, pipe_interval_s=0.0)
    p.update(10)
    p.update(20)
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[generate] 10/100 tokens, ") and lines[-1].startswith("[generate] 20/100 tokens, ")
    quiet = io.StringIO()
    q = Progress(100, stream=quiet, enabled=False, pipe_interval_s=0.0)
    q.update(50)
    q.close()
    assert quiet.getvalue() == ""
    slow = io.StringIO()
    s = Progress(100, stream=slow, pipe_interval_s=3600.0)
    s.update(1)
    s.close()
    assert slow.getvalue() == ""  # nothing within the interval, and close() adds nothing then


def test_missing_checkpoints_fail_before_launch_with_a_hint(tmp_path):
    """A configured checkpoint without weights fails at the entry point, naming the field and how to get it."""
    import generate
    from tests.conftest import build

    gguf = tmp_path / "smollm2-135m-instruct.gguf"
    cfg = build("generate", [f"model.target.checkpoint={gguf}", f"model.draft.checkpoint={tmp_path / 'smollm2-draft'}"])
    target_missing = r"model\.target\.checkpoint: .* has no weights.*runtime\.fetch_smollm2"
    with pytest.raises(ValueError, match=target_missing):
        generate.check_checkpoints(cfg)
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match=r"model\.draft\.checkpoint: .*smollm2-draft has no weights.*train"):
        generate.check_checkpoints(cfg)
