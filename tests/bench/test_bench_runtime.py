"""bench/bench_runtime.py: every system on the tiny pair (CPU), token identity with transformers, the results
JSON and table, the byte floor against hand-computed values, the tie-aware check on hand-built logits, and
the relaunch-after-failure logic of phase 1 with a fake launcher."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import bench.bench_runtime as B
from bench import peers
from conf.bench_schema import build_bench_config
from conf.presets import model_preset
from conf.rundir import atomic_write_json
from tests.conftest import compose
from tests.runtime import save_hf_checkpoint

MODES = ("autoregressive", "chain", "serial_tree", "async_tree")
ROW_KEYS = {"system", "mode", "status", "gpus", "tokens_per_s", "tokens_per_s_repeats", "time_per_output_token_s",
            "mean_accept_len", "iteration_time_s", "verify_time_s", "per_forward_s", "byte_floor", "byte_floor_s",
            "measured_over_floor", "outputs_check", "repeats"}
# tiny-llama, fp32: embedding 256 x 64 and LM head (untied) 16384 each; a layer = q|k|v 64 x 128 + o 64 x 64
# (12288) + SwiGLU 3 x 64 x 176 (33792) + two norms (128) = 46208; 2 layers + final norm 64 -> 125248 weights.
TINY_WEIGHT_BYTES = 125_248 * 4
TINY_KV_BYTES_PER_TOKEN = 2 * 2 * (2 * 16) * 4  # K and V x 2 layers x (2 kv heads x 16) x 4 bytes = 512
H200_BYTES_PER_S = 4.29e12


def bench_cfg(overrides: list[str]):
    """conf/bench_runtime.yaml + overrides -> validated, frozen BenchRuntimeConfig."""
    return build_bench_config(compose("bench_runtime", overrides))


@pytest.fixture(scope="module")
def tiny_result(tmp_path_factory):
    """One run of every system on tiny-llama + tiny-llama-draft HF checkpoints (fp32, CPU, 2 prompts)."""
    tmp = tmp_path_factory.mktemp("bench")
    save_hf_checkpoint(model_preset("tiny-llama"), tmp / "target", seed=3)
    save_hf_checkpoint(model_preset("tiny-llama-draft"), tmp / "draft", seed=4)
    doc = tmp / "BENCH.md"
    doc.write_text("# Runtime benchmarks\n\nmethod\n")
    bc = bench_cfg(["preset=tiny", "device=cpu", "repeats=2", "warmup_runs=1", "warmup_new_tokens=4",
                    f"out_dir={tmp / 'results'}", f"doc={doc}", f"presets.tiny.target_checkpoint={tmp / 'target'}",
                    f"presets.tiny.draft_checkpoint={tmp / 'draft'}"])
    result = B.run_bench(bc, tmp / "run", "pytest")
    return SimpleNamespace(result=result, tmp=tmp, doc=doc)


@pytest.mark.timeout(300)
def test_every_system_runs_and_our_tokens_equal_transformers_greedy(tiny_result):
    rows = {(r["system"], r["mode"]): r for r in tiny_result.result["rows"]}
    expected = {(B.OURS, m) for m in MODES} | {("transformers", "greedy"), ("transformers", "assisted"),
                                             ("deepspeed", "autotp_tp2")}
    assert set(rows) == expected
    for key, row in rows.items():
        if key[0] == "deepspeed" and not torch.cuda.is_available():
            assert row["status"] == "skipped" and "CUDA" in row["reason"] and row["tokens_per_s"] is None
            continue
        assert row["status"] == "ok", (key, row.get("reason"))
        assert row["generated_tokens"] == 2 * 16  # 2 prompts x 16 new tokens (no EOS for random weights)
        assert row["repeats"] == 2 and len(row["tokens_per_s_repeats"]) == 2
        assert row["tokens_per_s"] == pytest.approx(sum(row["tokens_per_s_repeats"]) / 2)  # median of two
        assert row["time_per_output_token_s"] == pytest.approx(row["wall_s"] / 32)
        assert row["verify_time_s"] > 0 and row["iteration_time_s"] > 0
    assert rows[("transformers", "greedy")]["mean_accept_len"] == 1.0  # one token per target forward
    assert rows[(B.OURS, "autoregressive")]["mean_accept_len"] == 1.0
    for key in [(B.OURS, m) for m in MODES] + [("transformers", "assisted")]:
        assert rows[key]["outputs_check"]["status"] == "identical", rows[key]["outputs_check"]

    # Independently of the benchmark's own check: plain full-recompute greedy with transformers' forward.
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_result.tmp / "target", dtype=torch.float32).eval()
    prompts = json.loads((tiny_result.tmp / "run" / "prompts.json").read_text())["prompts"]
    reference = []
    for prompt in prompts:
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(16):
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        reference.append(ids[len(prompt):])
    for mode in MODES:
        raw = json.loads((tiny_result.tmp / "run" / "runtime" / f"{mode}.json").read_text())
        assert [rep["outputs"] for rep in raw["repeats"]] == [reference, reference], mode
        lines = (tiny_result.tmp / "run" / "runtime" / f"{mode}__r1" / "outputs.jsonl").read_text().splitlines()
        assert [json.loads(line)["tokens"] for line in lines] == reference, mode  # the run dir keeps them too


def test_results_json_has_every_key_and_the_floor_from_the_shapes(tiny_result):
    path = Path(tiny_result.result["json"])
    assert path.parent == tiny_result.tmp / "results" and path.name.startswith("runtime_tiny_")
    data = json.loads(path.read_text())
    assert {"git_sha", "device", "date", "config", "workload_config", "experiment_config", "rows", "table",
            "prompt_tokens", "hbm_bytes_per_s"} <= set(data)
    assert data["git_sha"] and data["device"] == "cpu" and data["prompt_tokens"] == [24, 24]
    assert data["config"]["repeats"] == 2 and data["workload_config"]["max_new_tokens"] == 16
    ctx_tokens = 24 + 16 / 2  # mean context over the decode
    floor_1 = (TINY_WEIGHT_BYTES + TINY_KV_BYTES_PER_TOKEN * ctx_tokens) / H200_BYTES_PER_S
    assert floor_1 == pytest.approx(517_376 / 4.29e12)
    for row in data["rows"]:
        assert set(row) >= ROW_KEYS, ROW_KEYS - set(row)
        assert row["byte_floor_s"] == pytest.approx(floor_1 / row["target_tp"])
        if row["status"] == "ok":
            assert row["measured_over_floor"] == pytest.approx(row["per_forward_s"] / row["byte_floor_s"])


def test_byte_floor_hand_computed():
    # Llama-3-8B bf16: 8,030,261,248 weights (README: 16.1 GB); KV 2 x 32 layers x 1024 x 2 B = 131072 B/token;
    # workload (a): 1024-token prompt + 512 / 2 -> 1280 tokens of context on average.
    f = B.byte_floor(model_preset("llama3-8b"), "bfloat16", 1280, 1, H200_BYTES_PER_S)
    assert f["weights_bytes"] == 16_060_522_496 and f["kv_bytes"] == 131_072 * 1280
    assert f["floor_s"] == pytest.approx((16_060_522_496 + 167_772_160) / 4.29e12)
    assert f["floor_s"] == pytest.approx(3.7828e-3, rel=1e-4)
    f2 = B.byte_floor(model_preset("tiny-llama"), "float32", 32, 2, H200_BYTES_PER_S)
    assert f2["floor_s"] == pytest.approx(517_376 / 2 / 4.29e12)


def test_markdown_table_lists_every_row_and_is_printed_last(tiny_result, capsys):
    rows = tiny_result.result["rows"]
    table = B.markdown_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + len(rows)
    for line, row in zip(lines[2:], rows):
        assert line.startswith(f"| {row['system']} | {row['mode']}")
        assert line.rstrip().endswith("|")
    assert "| transformers | greedy | 1 |" in table and "reference" in table
    doc = tiny_result.doc.read_text()
    assert doc.startswith("# Runtime benchmarks\n\nmethod\n") and "## tiny: " in doc and table in doc
    B.print_summary(tiny_result.result)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-len(lines):] == lines
    summary = json.loads(out[-len(lines) - 1])
    assert summary["ok"] + summary["error"] + summary["skipped"] == len(rows) and summary["error"] == 0


def test_real_pair_without_a_trained_draft_is_skipped_with_a_note(tmp_path):
    (tmp_path / "draft").mkdir()
    bc = bench_cfg(["preset=real_pair", "device=cpu", f"out_dir={tmp_path}", f"doc={tmp_path / 'doc.md'}",
                    f"presets.real_pair.draft_checkpoint={tmp_path / 'draft'}"])
    result = B.run_bench(bc, tmp_path / "run", "pytest")
    assert {r["status"] for r in result["rows"]} == {"skipped"}
    assert len(result["rows"]) == 4 + 3  # our modes + hf greedy, hf assisted, deepspeed
    assert any("not measured" in n for n in result["notes"])
    assert "checkpoint" in result["rows"][0]["reason"]
    assert json.loads(Path(result["json"]).read_text())["rows"] == result["rows"]
    assert not (tmp_path / "doc.md").exists()  # nothing measured: no doc section


def test_a_failed_mode_becomes_an_error_row_and_the_others_are_relaunched(tmp_path, monkeypatch):
    import runtime.launch

    calls = []

    def fake_launch(fn, cfg):  # stands for runtime.launch: rank 0 writes <mode>.json per finished mode
        jobs = fn.keywords["jobs"]
        calls.append([j.name for j in jobs])
        for job in jobs:
            if job.name == "chain":
                raise RuntimeError("rank 1 (draft) failed: boom")
            atomic_write_json(Path(fn.keywords["out_dir"]) / f"{job.name}.json", {"repeats": [{"outputs": []}]})

    monkeypatch.setattr(runtime.launch, "launch", fake_launch)
    bc = bench_cfg(["preset=tiny", "device=cpu"])
    jobs = [B.ModeJob(m, None, None) for m in MODES]
    results = B.run_ours(bc, jobs, [[1, 2]], None, tmp_path, deadline=float("inf"))
    assert calls == [list(MODES), ["serial_tree", "async_tree"]]
    assert "boom" in results["chain"]["error"]
    assert all("repeats" in results[m] for m in ("autoregressive", "serial_tree", "async_tree"))
    skipped = B.run_ours(bc, jobs, [[1, 2]], None, tmp_path / "late", deadline=0.0)  # budget already spent
    assert all("budget" in r["skipped"] for r in skipped.values()) and len(calls) == 2


class _LogitsModel:
    """A reference model whose next-token logits depend only on the prefix length (hand-built)."""

    device = torch.device("cpu")

    def __init__(self, rows: dict[int, list[float]]) -> None:
        self.rows = rows

    def __call__(self, input_ids: torch.Tensor) -> SimpleNamespace:
        row = torch.tensor(self.rows[input_ids.shape[1]])
        return SimpleNamespace(logits=row.expand(1, input_ids.shape[1], -1))


@pytest.mark.parametrize("dtype,margin,status", [
    ("float32", 0.0005, "tie"), ("float32", 0.3, "error"), ("bfloat16", 0.3, "tie"), ("bfloat16", 2.0, "error"),
], ids=["fp32-tie", "fp32-error", "bf16-tie", "bf16-error"])
def test_tie_aware_check_on_hand_built_logits(dtype, margin, status):
    # prompt of 2 tokens; the outputs differ at step 2, so the margin is read after 2 + 2 tokens
    model = _LogitsModel({4: [0.0, 1.0, 5.0, 5.0 - margin, 0.5]})
    check = peers.check_outputs(model, [[7, 8]], [[1, 2, 3]], [[1, 2, 4]], dtype)
    assert check["status"] == status and check["epsilon"] == peers.TIE_EPSILON[dtype]
    (req,) = check["requests"]
    assert req["first_divergence"] == 2 and req["margin"] == pytest.approx(margin, abs=1e-6)  # fp32 logits
    assert (req["reference_token"], req["token"]) == (3, 4)
    same = peers.check_outputs(model, [[7, 8]], [[1, 2, 3]], [[1, 2, 3]], dtype)
    assert same["status"] == "identical" and same["requests"] == [{"request": 0, "identical": True}]


def test_first_divergence():
    assert peers.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert peers.first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert peers.first_divergence([1, 2, 3], [1, 2]) == 2  # a shorter output diverges where it stops


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="preset: unknown workload preset 'nope'"):
        bench_cfg(["preset=nope"])
    with pytest.raises(ValueError, match="presets.shape_realistic.check_outputs"):
        bench_cfg(["presets.shape_realistic.check_outputs=true"])
    with pytest.raises(ValueError, match="presets.tiny.peers"):
        bench_cfg(["presets.tiny.peers=[vllm]"])
    bc = bench_cfg([])
    assert bc.preset == "shape_realistic" and set(bc.presets) == {"shape_realistic", "real_pair", "real_pair_shapes",
                                                                  "tiny"}
    assert bc.selected.oracle and bc.selected.max_new_tokens == 512 and bc.selected.prompt_tokens == 1024
    # the real pair's shapes without its weights: random weights, the instruction prompts' acceptance as oracle
    shapes = bc.presets["real_pair_shapes"]
    assert shapes.oracle and not shapes.check_outputs and shapes.model == "smollm2" and shapes.prompt_file is None
    assert {"acceptance=smollm2_instruction", "model.target.checkpoint=null"} <= set(shapes.experiment_overrides)


@pytest.mark.parametrize("preset", ["shape_realistic", "real_pair", "tiny"])
def test_every_preset_composes_our_four_modes_and_the_deepspeed_split(preset):
    bc = bench_cfg([f"preset={preset}"])
    wl = bc.selected
    base = B.base_overrides(bc, wl, "cpu")
    jobs, invalid = B.mode_jobs(bc, base)
    assert invalid == {} and [j.name for j in jobs] == list(MODES)
    for job in jobs:
        cfg = job.cfg
        assert cfg.spec.mode == job.name and cfg.spec.oracle == wl.oracle
        # kernels: the group option name; `graphs` = Triton kernels + CUDA graphs
        assert (cfg.kernels.backend, cfg.kernels.cuda_graphs) == {"graphs": ("triton", True),
                                                                  "triton": ("triton", False),
                                                                  "reference": ("reference", False)}[wl.kernels]
        assert cfg.model.target.dtype == wl.dtype and cfg.workload.max_new_tokens == wl.max_new_tokens
        assert job.warmup_cfg.workload.max_new_tokens == min(bc.warmup_new_tokens, wl.max_new_tokens)
        assert (cfg.parallel.target_gpus, cfg.parallel.draft_gpus) == (1, 1)
    ds = B.compose_experiment([*base, "spec=autoregressive", f"parallel.target_gpus={bc.deepspeed_tp_size}",
                             "parallel.draft_gpus=0"])
    assert (ds.parallel.target_gpus, ds.parallel.draft_gpus) == (2, 0)
    if preset == "shape_realistic":
        assert (jobs[0].cfg.model.target.preset, jobs[0].cfg.model.draft.preset) == ("llama3-8b", "llama3.2-1b")
        assert jobs[0].cfg.workload.prompt_tokens == 1024 and "hf_assisted" not in wl.peers


def test_oracle_repeats_draw_their_own_streams():
    """oracle_seeds=per_repeat (the default): in an oracle workload, measured repeat k of a speculative mode decodes
    with workload.seed + k, the rest of its configuration unchanged (the prompts come from bc.seed); the
    autoregressive mode never draws and keeps one configuration; fixed, or a workload without the oracle, keeps
    one stream. A bad value names the field."""
    bc = bench_cfg(["preset=shape_realistic", "repeats=3", "seed=5"])
    jobs, _ = B.mode_jobs(bc, B.base_overrides(bc, bc.selected, "cpu"))
    for job in jobs:
        seeds = [job.repeat_cfg(k).workload.seed for k in range(3)]
        assert seeds == ([5, 5, 5] if job.name == "autoregressive" else [5, 6, 7])
        for k in range(3):
            a, b = job.repeat_cfg(k), job.cfg
            assert (a.spec, a.model, a.kernels, a.workload.max_new_tokens) == (b.spec, b.model, b.kernels,
                                                                               b.workload.max_new_tokens)
    for overrides in (["oracle_seeds=fixed"], ["preset=real_pair"]):
        bc = bench_cfg(["repeats=3", "seed=5", *overrides])
        jobs, _ = B.mode_jobs(bc, B.base_overrides(bc, bc.selected, "cpu"))
        assert all(job.repeat_cfg(k).workload.seed == 5 for job in jobs for k in range(3))
    with pytest.raises(ValueError, match="oracle_seeds: 'each' is not one of per_repeat, fixed"):
        bench_cfg(["oracle_seeds=each"])
