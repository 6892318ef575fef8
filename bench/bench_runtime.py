"""Runtime benchmark: our four modes and peer systems on the same prompts -> results JSON + markdown table.

    python bench/bench_runtime.py preset=shape_realistic     # (a) 2 GPUs: ours 1 + 1, DeepSpeed TP 2
    python bench/bench_runtime.py preset=real_pair           # (b) needs a trained models/smollm2-draft
    python bench/bench_runtime.py preset=tiny device=cpu     # CPU smoke run

Run it with plain `python` from the repository root, not under torchrun / deepspeed: it starts the ranks of
each launch itself (`runtime.launch`, spawn). Config: conf/bench_runtime.yaml (conf/bench_schema.py); method
and results: docs/BENCHMARKS_RUNTIME.md.

Phases, in one process; a phase or system that fails becomes a row with its error and the rest continues:
1. ours: one `runtime.launch` over the workload's split runs every mode of `modes` (`autoregressive`,
   `chain`, `serial_tree`, `async_tree`), each composed from conf/generate.yaml like `python generate.py`;
   models are built once per rank process (calibration/validate.py's caching engine) and reused by every mode;
   per mode `warmup_runs` short runs, then `repeats` measured ones. Rank 0 writes each mode's repeats (and a
   run dir per repeat) as it finishes; a failed launch is relaunched for the modes left.
2. deepspeed: a second launch of `deepspeed_tp_size` target ranks (bench/peers.py `run_deepspeed`).
3. transformers in this process (GPU 0 or CPU): greedy, then assisted with our draft (eager, bench/peers.py).
4. the compiled single-GPU peers in this process (bench/compiled_peers.py): our model decoded the gpt-fast way
   (`gptfast_compiled`: autoregressive, chain at the chain mode's gamma), transformers' static cache + compiled forward
   (`transformers_compiled`: greedy, assisted); their compile settings, compile diagnostics (graphs, recompiles, graph
   breaks, CUDA-graph skips and why) and warm-up (compile) time go in their rows. Each job has its own time budget
   (`peer_budget_s`). With `profile_steps=true`, per-kernel profiles of one decode step of ours and of gptfast go in
   the results' `kernel_profiles`.
Then every system's tokens are checked against a greedy transformers run's (eager if it ran, else compiled;
tie-aware, `bench.peers.check_outputs`). With compiled peers the result also holds `comparison` (`peer_comparison`:
our autoregressive decode time per token against the best compiled peer's, our chain iteration against gptfast's, each
with its byte floor) and its `comparison_table`.
Every system decodes the same token-id prompts with the same stop rule (EOS of the tokenizer, or none for
random weights, and `max_new_tokens`).

Results: runs/bench/runtime_<preset>_<date>_<sha>.json (git SHA, device, date, config, one row per system and
mode: medians over repeats and the byte floor per target forward), written after every phase; a dated
section appended to docs/BENCHMARKS_RUNTIME.md; the run dir (Hydra's) keeps the per-repeat raw results.
The last lines printed are one JSON summary line, then the markdown table.
"""

from __future__ import annotations

import datetime
import json
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from conf.bench_schema import BenchRuntimeConfig, BenchWorkloadConfig, build_bench_config, register_bench_configs  # noqa: E402
from conf.presets import GPU_PRESETS, ModelShape, model_preset  # noqa: E402
from conf.rundir import REPO_ROOT, atomic_write_json, atomic_write_text, git_sha  # noqa: E402

register_bench_configs()

OURS = "swiftspec"
"""System name of our runtime in the rows."""
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ROW_METRICS = ("tokens_per_s", "time_per_output_token_s", "decode_tpot_s", "mean_accept_len", "iteration_time_s",
               "verify_time_s", "expand_time_s", "generated_tokens", "wall_s")
"""Per-repeat values a row reports as medians over its repeats. `time_per_output_token_s`: wall time (prefills
included) / generated tokens; `decode_tpot_s`: (time of the last token - time of the first) / (n - 1) summed over the
requests (`decode_tpot`; the compiled peers and ours only)."""
SPEED_TARGET = 1.15
"""Target of the compiled-peer comparison (`peer_comparison`): our time <= the best compiled peer's / 1.15."""


@dataclass(frozen=True)
class ModeJob:
    """One of our modes: its measured configuration, its (shorter) warm-up configuration, and the configuration of
    each measured repeat after the first where they differ (`oracle_seeds=per_repeat`: the oracle's seed)."""

    name: str
    cfg: Any  # ExperimentConfig
    warmup_cfg: Any
    repeat_cfgs: tuple[Any, ...] = ()

    def repeat_cfg(self, k: int) -> Any:
        """The configuration measured repeat `k` decodes with."""
        return self.repeat_cfgs[k - 1] if 0 < k <= len(self.repeat_cfgs) else self.cfg


# ---- configs and prompts ---------------------------------------------------------------------------------
def compose_experiment(overrides: list[str]) -> Any:
    """conf/generate.yaml + overrides -> validated, frozen ExperimentConfig (inside or outside a Hydra app)."""
    from conf import compose_config

    return compose_config("generate", overrides)


def base_overrides(bc: BenchRuntimeConfig, wl: BenchWorkloadConfig, device: str) -> list[str]:
    """The Hydra overrides of conf/generate.yaml shared by every one of our runs of workload `wl`."""
    out = ["workload=default", f"model={wl.model}", f"kernels={wl.kernels}", f"parallel={wl.parallel}",
           f"parallel.device={device}",
           f"parallel.timeout_s={bc.timeout_s}", f"spec.oracle={str(wl.oracle).lower()}",
           f"workload.prompt_tokens={wl.prompt_tokens}", f"workload.num_requests={wl.num_prompts}",
           f"workload.max_new_tokens={wl.max_new_tokens}", f"workload.max_seq_len_tokens={wl.max_seq_len_tokens}",
           f"workload.seed={bc.seed}", "trace.chrome=false"]
    if wl.dtype is not None:
        out += [f"model.target.dtype={wl.dtype}", f"model.draft.dtype={wl.dtype}"]
    for role, path in (("target", wl.target_checkpoint), ("draft", wl.draft_checkpoint)):
        if path is not None:
            out.append(f"model.{role}.checkpoint='{path}'")
    return out + list(wl.experiment_overrides)


def mode_jobs(bc: BenchRuntimeConfig, base: list[str]) -> tuple[list[ModeJob], dict[str, dict[str, Any]]]:
    """(a ModeJob per mode of `bc.modes`, {mode: {"error"}} for modes whose configuration is invalid).

    Spec group defaults apply: chain gamma 4, trees bs 8 w 8 d auto (overridable per workload).
    """
    warm = min(bc.warmup_new_tokens, bc.selected.max_new_tokens)
    per_repeat = bc.selected.oracle and bc.oracle_seeds == "per_repeat"
    jobs, errors = [], {}
    for m in bc.modes:
        try:
            # the prompts come from bc.seed (make_prompts); a later repeat's seed only changes the oracle's stream
            reseeded = tuple(compose_experiment([*base, f"spec={m}", f"run_name=bench_{m}",
                                                 f"workload.seed={bc.seed + k}"])
                             for k in range(1, bc.repeats)) if per_repeat and m != "autoregressive" else ()
            jobs.append(ModeJob(m, compose_experiment([*base, f"spec={m}", f"run_name=bench_{m}"]),
                                compose_experiment([*base, f"spec={m}", f"run_name=bench_{m}_warmup",
                                                    f"workload.max_new_tokens={warm}"]), reseeded))
        except Exception as exc:  # validation names the field; the other modes still run
            errors[m] = {"error": f"invalid configuration: {exc}"}
    return jobs, errors


def make_prompts(wl: BenchWorkloadConfig, cfg: Any) -> tuple[list[list[int]], int | None]:
    """Token-id prompts every system decodes, and the EOS id (None for random-weight models).

    Text prompts: the first `num_prompts` lines of `prompt_file`, in the target GGUF's chat template if
    `chat_template`, EOS from the tokenizer; else `num_prompts` random prompts of `prompt_tokens` drawn as
    runtime.controller draws them (from workload.seed), EOS = workload.eos_token_id (none by default).
    """
    import torch

    from runtime.controller import load_workload

    if wl.prompt_file is None:
        gen = torch.Generator().manual_seed(cfg.workload.seed)
        vocab = model_preset(cfg.model.target.preset).token_count
        prompts = [torch.randint(0, vocab, (wl.prompt_tokens,), generator=gen).tolist() for _ in range(wl.num_prompts)]
        return load_workload(cfg, prompts, cfg.workload.eos_token_id)
    lines = [ln for ln in Path(wl.prompt_file).read_text().splitlines() if ln.strip()]
    texts = [json.loads(ln)["prompt"] for ln in lines][: wl.num_prompts]
    source = cfg.model.tokenizer or cfg.model.target.checkpoint
    if wl.chat_template:
        from runtime.distill import GGUFTokenizer

        tok: Any = GGUFTokenizer(source)
        prompts = [tok.chat(t) for t in texts]
    else:
        from runtime.tokenizer import load_tokenizer

        tok = load_tokenizer(source)
        prompts = [tok.encode(t) for t in texts]
    return load_workload(cfg, prompts, tok.eos_id)  # checked against the vocabulary and the cache


def workload_skip_reason(wl: BenchWorkloadConfig, cfg: Any) -> str | None:
    """Why the whole workload cannot run (missing checkpoints of a real pair), or None."""
    for role in ("target", "draft"):
        mcfg = getattr(cfg.model, role)
        path = None if mcfg is None or mcfg.checkpoint is None else REPO_ROOT / mcfg.checkpoint
        if path is not None and not path.exists():
            hint = " (python -m runtime.fetch_smollm2)" if path.suffix == ".gguf" else ""
            return f"{role} checkpoint {mcfg.checkpoint} is missing{hint}"
    draft = cfg.model.draft
    has_config = draft is not None and (REPO_ROOT / str(draft.checkpoint) / "config.json").is_file()
    if wl.require_draft_checkpoint and draft is not None and not has_config:
        return (f"draft checkpoint {draft.checkpoint} has no config.json (not trained yet: "
                f"scripts/gpu.sh train_draft)")
    return None


# ---- phase 1: our runtime --------------------------------------------------------------------------------
def decode(ctx: Any, cfg: Any, prompts: list[list[int]], eos_token_id: int | None) -> dict[str, Any] | None:
    """`runtime.engine.run_rank` with models cached across runs (the device is synchronised around the timed
    region there); rank 0 returns metrics, outputs, iteration rows and traces."""
    from calibration.validate import caching_engine_class
    from runtime.engine import run_rank

    return run_rank(ctx, cfg, prompts, eos_token_id, engine_cls=caching_engine_class())


def run_modes(ctx: Any, cfg: Any, *, jobs: list[ModeJob], prompts: list[list[int]], eos_token_id: int | None,
              out_dir: str, deadline: float, repeats: int, warmup_runs: int) -> list[str]:
    """Rank function: per mode, warm-up runs then `repeats` measured runs; rank 0 writes <mode>.json (the
    repeats' metrics and outputs) and a run dir per repeat into `out_dir` as each mode finishes."""
    from calibration.validate import _agree
    from conf.rundir import run_meta
    from runtime.metrics import output_records, write_run_dir

    done = []
    for job in jobs:
        if not _agree(ctx, time.time() < deadline):  # rank 0's clock decides for every rank
            break
        for _ in range(warmup_runs):
            decode(ctx, job.warmup_cfg, prompts, eos_token_id)
        reps = [decode(ctx, job.repeat_cfg(k), prompts, eos_token_id) for k in range(repeats)]
        if ctx.rank == 0:
            for rep in reps:
                rep["metrics"]["decode_tpot_s"] = decode_tpot(rep["iterations"], rep["outputs"])
            for k, rep in enumerate(reps):
                cfg_k = job.repeat_cfg(k)
                meta = run_meta(cfg_k.seed, f"bench/bench_runtime.py ({job.name} repeat {k})", rep["metrics"]["gpu"],
                                source="runtime", oracle=bool(cfg_k.spec.oracle))
                write_run_dir(Path(out_dir) / f"{job.name}__r{k}", cfg_k, meta, rep["metrics"], rep["iterations"],
                              rep["traces"], outputs=output_records(cfg_k, rep))
            atomic_write_json(Path(out_dir) / f"{job.name}.json",
                              {"repeats": [{**r["metrics"], "outputs": r["outputs"]} for r in reps]})
            tps = [round(r["metrics"]["tokens_per_s"] or 0.0, 1) for r in reps]
            print(f"[bench] {OURS} {job.name}: tokens/s {tps}, accept {reps[-1]['metrics']['mean_accept_len']}",
                  flush=True)
        done.append(job.name)
    return done


def run_ours(bc: BenchRuntimeConfig, jobs: list[ModeJob], prompts: list[list[int]], eos: int | None, out: Path,
             deadline: float) -> dict[str, dict[str, Any]]:
    """Phase 1: {mode: {"repeats": [...]} | {"error": ...} | {"skipped": ...}}."""
    import bench.bench_runtime as this  # spawned ranks import the rank function by its module name
    from runtime.launch import launch

    results: dict[str, dict[str, Any]] = {}
    remaining = list(jobs)
    while remaining and time.time() < deadline:
        fn = partial(this.run_modes, jobs=remaining, prompts=prompts, eos_token_id=eos, out_dir=str(out),
                     deadline=deadline, repeats=bc.repeats, warmup_runs=bc.warmup_runs)
        error = None
        try:
            launch(fn, remaining[0].cfg)
        except Exception as exc:  # a failed mode must not cost the others: relaunch for the rest
            error = f"{type(exc).__name__}: {exc}"[:4000]
        for job in remaining:
            path = out / f"{job.name}.json"
            if path.is_file():
                results[job.name] = json.loads(path.read_text())
        left = [j for j in remaining if j.name not in results]
        if error is None or not left:
            break  # the launch ended normally: modes left were stopped by the budget
        results[left[0].name] = {"error": error}
        print(f"[bench] {OURS} {left[0].name} failed: {error.splitlines()[0]}", flush=True)
        remaining = left[1:]
    for job in jobs:
        results.setdefault(job.name, {"skipped": f"time budget spent (budget_s={bc.budget_s})"})
    return results


def decode_tpot(iterations: list[dict[str, Any]], outputs: list[list[int] | None]) -> float | None:
    """Decode time per output token of one of our runs: per request, the end of its last iteration minus the end of
    its first (which emits the first token), summed, over the sum of (tokens - 1). The iteration spans are the
    host's (a token is known when it reaches the host), so host work per token is included."""
    ends: dict[int, list[float]] = {}
    for row in iterations:
        ends.setdefault(int(row["request"]), []).append(float(row["end_s"]))
    decode = sum(max(e) - min(e) for e in ends.values())
    after_first = sum(len(o) - 1 for rid, o in enumerate(outputs) if o and rid in ends)
    return decode / after_first if after_first > 0 else None


# ---- rows, floors, tables --------------------------------------------------------------------------------
def byte_floor(shape: ModelShape, dtype: str, ctx_tokens: float, tp: int, hbm_bytes_per_s: float) -> dict[str, Any]:
    """Lower bound of one target forward: every weight and the KV cache read once from HBM, over `tp` GPUs.

    floor_s = (num_params x bytes + kv_bytes_per_token x ctx_tokens) / (tp x hbm_bytes_per_s), with
    num_params counting a tied LM head once (conf/presets.py) and ctx_tokens the mean context of the decode.
    """
    b = DTYPE_BYTES[dtype]
    weights, kv = shape.num_params() * b, shape.kv_bytes_per_token(b) * ctx_tokens
    return {"weights_bytes": weights, "kv_bytes": kv, "ctx_tokens": ctx_tokens, "tp": tp,
            "hbm_bytes_per_s": hbm_bytes_per_s, "floor_s": (weights + kv) / (tp * hbm_bytes_per_s)}


def _median(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def make_row(system: str, mode: str, raw: dict[str, Any], *, gpus: int, tp: int, floor: dict[str, Any],
             oracle: bool, check: dict[str, Any] | None, notes: str = "") -> dict[str, Any]:
    """One results row: medians over the repeats in `raw`, or the error / skip reason."""
    row: dict[str, Any] = {"system": system, "mode": mode, "status": "ok", "gpus": gpus, "target_tp": tp,
                           "oracle": oracle, "notes": notes}
    if "repeats" not in raw:
        row["status"] = "error" if "error" in raw else "skipped"
        row["reason"] = raw.get("error") or raw.get("skipped")
    reps = raw.get("repeats", [])
    row["repeats"] = len(reps)
    for key in ROW_METRICS:
        row[key] = _median([r.get(key) for r in reps])
    row["tokens_per_s_repeats"] = [r.get("tokens_per_s") for r in reps]
    row["accept_len_repeats"] = [r.get("mean_accept_len") for r in reps]
    row["per_forward_s"] = row["verify_time_s"]
    row["byte_floor"] = floor
    row["byte_floor_s"] = floor["floor_s"]
    row["measured_over_floor"] = row["per_forward_s"] / floor["floor_s"] if row["per_forward_s"] else None
    row["outputs_check"] = check
    row["spec"] = spec_label(mode, reps[0]) if system == OURS and reps else (
        f"gamma {raw['gamma']}" if "gamma" in raw else "")
    if system == OURS and reps and "d_rule" in reps[0]:  # fixed | runtime (auto: the depth tuner's)
        row["d_rule"] = reps[0]["d_rule"]
    for key in ("compile_s", "compile", "generation", "cache_slots"):  # the compiled peers'
        if key in raw:
            row[key] = raw[key]
    return row


def spec_label(mode: str, metrics: dict[str, Any]) -> str:
    """The speculation shape of one of our runs, e.g. "gamma 4" or "bs 8 w 8 d auto=2" (auto: d used)."""
    if mode == "chain":
        return f"gamma {metrics['gamma']}"
    if mode in ("serial_tree", "async_tree"):
        d = f"auto={metrics.get('d_used')}" if metrics["d"] == "auto" else metrics["d"]
        return f"bs {metrics['bs']} w {metrics['w']} d {d}"
    return ""


def build_rows(bc: BenchRuntimeConfig, cfg: Any, prompts: list[list[int]], ours: dict[str, Any],
               ds: dict[str, Any] | None, hf: dict[str, Any], checks: dict[str, Any],
               compiled: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every system's row, in table order: our modes, transformers, DeepSpeed, the compiled peers. Chain rows also
    get `iteration_floor_s`: one target forward's floor + gamma draft forwards' (`chain_floor`)."""
    wl = bc.selected
    shape, dtype = model_preset(cfg.model.target.preset), cfg.model.target.dtype
    ctx_tokens = statistics.fmean(len(p) for p in prompts) + wl.max_new_tokens / 2
    hbm = GPU_PRESETS[bc.gpu].hbm_bytes_per_s

    def floor(tp: int) -> dict[str, Any]:
        return byte_floor(shape, dtype, ctx_tokens, tp, hbm)

    peer_note = "no oracle: decodes the random weights; compare tok/s and per-forward time only" if wl.oracle else ""
    t, d = cfg.parallel.target_gpus, cfg.parallel.draft_gpus
    rows = [make_row(OURS, m, ours[m], gpus=t + (d if m != "autoregressive" else 0), tp=t, floor=floor(t),
                     oracle=wl.oracle and m != "autoregressive", check=checks.get(f"{OURS}/{m}"),
                     notes="acceptance oracle" if wl.oracle and m != "autoregressive" else "") for m in ours]
    for peer, mode in (("hf_greedy", "greedy"), ("hf_assisted", "assisted")):
        if peer in wl.peers:
            raw = hf.get(peer, {"skipped": "not run (yet)"})
            note = peer_note or (f"attention: {raw['attn_implementation']}" if "attn_implementation" in raw else "")
            rows.append(make_row("transformers", mode, raw, gpus=1, tp=1, floor=floor(1), oracle=False,
                                 check=checks.get(f"transformers/{mode}"), notes=note))
    if ds is not None:
        tp = bc.deepspeed_tp_size
        rows.append(make_row("deepspeed", f"autotp_tp{tp}", ds, gpus=tp, tp=tp, floor=floor(tp), oracle=False,
                             check=checks.get("deepspeed"), notes=peer_note))
    for key, raw in (compiled or {}).items():
        system, mode = key.split("/")
        note = peer_note or (f"attention: {raw['attn_implementation']}" if "attn_implementation" in raw else "")
        rows.append(make_row(system, mode, raw, gpus=1, tp=1, floor=floor(1), oracle=False, check=checks.get(key),
                             notes=note))
    draft = cfg.model.draft
    for row in rows:
        if row["mode"] == "chain" and draft is not None and row["target_tp"] == 1 and row["spec"].startswith("gamma"):
            row["iteration_floor_s"] = chain_floor(row["byte_floor"], model_preset(draft.preset), draft.dtype,
                                                   int(row["spec"].split()[1]))
    return rows


def chain_floor(target_floor: dict[str, Any], draft_shape: ModelShape, draft_dtype: str, gamma: int) -> float:
    """Lower bound of one chain iteration on one GPU: the target's verify forward (its weights and KV read once,
    `target_floor`) plus gamma one-token draft forwards, each reading the draft's weights and its KV at the same
    mean context."""
    draft = byte_floor(draft_shape, draft_dtype, target_floor["ctx_tokens"], 1, target_floor["hbm_bytes_per_s"])
    return target_floor["floor_s"] + gamma * draft["floor_s"]


def peer_comparison(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ours against the compiled peers on what does not depend on acceptance: autoregressive decode time per output
    token against the best compiled peer's (gptfast autoregressive, transformers compiled greedy), and our chain
    iteration against gptfast's compiled chain iteration. `speedup` = peer / ours; the target is `SPEED_TARGET`.
    Measures a side lacks are None."""
    by = {(r["system"], r["mode"]): r for r in rows if r["status"] == "ok"}

    def entry(ours: dict[str, Any] | None, peers: list[tuple[str, str]], key: str, floor_key: str) -> dict[str, Any]:
        cands = [(by[p][key], f"{p[0]}/{p[1]}") for p in peers if p in by and by[p].get(key)]
        best = min(cands) if cands else None
        ours_v = ours.get(key) if ours else None
        speedup = best[0] / ours_v if best and ours_v else None
        return {"ours_s": ours_v, "best_peer": best[1] if best else None, "best_peer_s": best[0] if best else None,
                "peers_s": {name: v for v, name in cands}, "speedup": speedup, "target": SPEED_TARGET,
                "met": None if speedup is None else speedup >= SPEED_TARGET,
                "floor_s": (ours or by.get(peers[0], {})).get(floor_key),
                "spec": (ours or by.get(peers[0], {})).get("spec", "")}

    out = {"autoregressive_tpot": entry(by.get((OURS, "autoregressive")),
                                        [("gptfast_compiled", "autoregressive"), ("transformers_compiled", "greedy")],
                                        "decode_tpot_s", "byte_floor_s"),
           "chain_iteration": entry(by.get((OURS, "chain")), [("gptfast_compiled", "chain")], "iteration_time_s",
                                    "iteration_floor_s")}
    out["tokens_per_s"] = {f"{r['system']}/{r['mode']}": r["tokens_per_s"] for r in rows if r["status"] == "ok"}
    out["outputs"] = {f"{r['system']}/{r['mode']}": r["outputs_check"]["status"] for r in rows if r["outputs_check"]}
    return out


def comparison_table(workload: str, comparison: dict[str, Any]) -> str:
    """The comparison as a short markdown table (one line per measure)."""
    lines = [f"| {workload} | ours (ms) | best compiled peer (ms) | peer / ours (target >= {SPEED_TARGET}) | "
             "floor (ms) |", "|---|---|---|---|---|"]
    for name, label in (("autoregressive_tpot", "AR time per output token"), ("chain_iteration", "chain iteration")):
        c = comparison[name]
        label += f", {c['spec']}" if c.get("spec") else ""
        peer = f"{_ms(c['best_peer_s'])} ({c['best_peer']})" if c["best_peer"] else "-"
        met = "" if c["met"] is None else (" met" if c["met"] else " NOT met")
        lines.append(f"| {label} | {_ms(c['ours_s'])} | {peer} | {_num(c['speedup'], 2)}{met} | "
                     f"{_ms(c['floor_s'])} |")
    return "\n".join(lines)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:.3g}"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


REFERENCES = (("transformers", "greedy"), ("transformers_compiled", "greedy"))
"""Whose tokens the others are checked against: the first of these that ran (eager greedy, else the compiled one)."""


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The results table: medians over repeats; per-forward = the target's verify / decode forward."""
    lines = ["| system | mode | GPUs | tok/s | TPOT (ms) | decode TPOT (ms) | accept len | iteration (ms) | "
             "verify / fwd (ms) | floor (ms) | meas / floor | outputs | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    has_checks = any(r["outputs_check"] for r in rows)
    reference = next((f"{r['system']}/{r['mode']}" for r in rows if r["status"] == "ok" and
                      (r["system"], r["mode"]) in REFERENCES), None)
    for r in rows:
        check = r["outputs_check"]["status"] if r["outputs_check"] else ("oracle" if r["oracle"] else "-")
        if f"{r['system']}/{r['mode']}" == reference and has_checks:
            check = "reference"
        mode = f"{r['mode']} ({r['spec']})" if r["spec"] else r["mode"]
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {str(r.get('reason')).splitlines()[0][:80]}"
        lines.append(f"| {r['system']} | {mode} | {r['gpus']} | {_num(r['tokens_per_s'])} | "
                     f"{_ms(r['time_per_output_token_s'])} | {_ms(r['decode_tpot_s'])} | "
                     f"{_num(r['mean_accept_len'], 2)} | "
                     f"{_ms(r['iteration_time_s'])} | {_ms(r['verify_time_s'])} | {_ms(r['byte_floor_s'])} | "
                     f"{_num(r['measured_over_floor'], 1)} | {check} | {status} |")
    return "\n".join(lines)


def device_label(device: Any) -> str:
    """"cpu" or e.g. "2 x NVIDIA H200"."""
    import torch

    if device.type != "cuda":
        return "cpu"
    return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"


def doc_section(result: dict[str, Any]) -> str:
    """The dated markdown section appended to the results doc (measured numbers only)."""
    wl = result["workload_config"]
    return "\n".join([
        f"## {result['workload']}: {result['date']} (git {result['git_sha'][:12]}, {result['device']})", "",
        f"{wl['description']}. {len(result['prompt_tokens'])} prompt(s) of {result['prompt_tokens']} tokens, "
        f"{wl['max_new_tokens']} new tokens, {result['config']['repeats']} measured repeats (medians) after "
        f"{result['config']['warmup_runs']} warm-up run(s)"
        + ("; the oracle's seed is workload.seed + k in repeat k" if wl.get("oracle")
           and result["config"].get("oracle_seeds") == "per_repeat" else "")
        + f"; results `{result['json']}`.", "",
        result["table"], "", *[f"- {n}" for n in result["notes"]], ""])


def run_bench(bc: BenchRuntimeConfig, run_dir: Path, command: str) -> dict[str, Any]:
    """Every phase for workload `bc.preset`; writes the results JSON (after every phase) and the doc section."""
    import dataclasses

    import torch

    from bench import peers
    from bench.compiled_peers import COMPILED_PEERS, run_compiled_phase

    t_start = time.time()
    deadline = t_start + bc.budget_s
    wl = bc.selected
    device = torch.device("cuda" if bc.device == "cuda" or (bc.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    base = base_overrides(bc, wl, device.type)
    probe = compose_experiment([*base, "spec=autoregressive", "run_name=bench_probe"])
    today = datetime.date.today().isoformat()
    json_path = Path(bc.out_dir) / f"runtime_{bc.preset}_{today}_{git_sha()[:7]}.json"
    result: dict[str, Any] = {
        "benchmark": "runtime", "workload": bc.preset, "date": today, "git_sha": git_sha(),
        "device": device_label(device), "command": command, "run_dir": str(run_dir), "json": str(json_path),
        "gpu_preset": bc.gpu, "hbm_bytes_per_s": GPU_PRESETS[bc.gpu].hbm_bytes_per_s,
        "config": {k: v for k, v in dataclasses.asdict(bc).items() if k != "presets"},
        "workload_config": dataclasses.asdict(wl), "experiment_config": dataclasses.asdict(probe),
        "prompt_tokens": [], "rows": [], "notes": [],
    }
    if wl.oracle:
        result["notes"].append("our draft modes run with the acceptance oracle (spec.oracle=true): their tokens are "
                               "the oracle's; the peers decode the same random weights without an oracle, so only "
                               "per-forward time and autoregressive tokens/s compare across systems")
    skip = workload_skip_reason(wl, probe)
    if skip is not None:
        result["notes"].append(f"workload not measured: {skip}")
        ours = {m: {"skipped": skip} for m in bc.modes}
        ds = {"skipped": skip} if "deepspeed" in wl.peers else None
        hf = {p: {"skipped": skip} for p in wl.peers}
        prompts: list[list[int]] = [[0] * wl.prompt_tokens]
        return finish(bc, result, probe, prompts, ours, ds, hf, {}, t_start, write_doc=False)
    prompts, eos = make_prompts(wl, probe)
    result["prompt_tokens"], result["eos_token_id"] = [len(p) for p in prompts], eos
    atomic_write_json(run_dir / "prompts.json", {"prompts": prompts, "eos_token_id": eos})
    jobs, invalid = mode_jobs(bc, base)
    ours = {**invalid, **run_ours(bc, jobs, prompts, eos, run_dir / "runtime", deadline)}
    ours = {m: ours[m] for m in bc.modes}  # table order
    finish(bc, result, probe, prompts, ours, None, {}, {}, t_start, write_doc=False)  # partial results on disk
    print(f"[bench] {OURS}: {time.time() - t_start:.0f} s so far", flush=True)
    ds = None
    if "deepspeed" in wl.peers:
        tp = bc.deepspeed_tp_size
        try:
            ds_cfg = compose_experiment([*base, "spec=autoregressive", f"parallel.target_gpus={tp}",
                                         "parallel.draft_gpus=0", "run_name=bench_deepspeed"])
            ds = peers.run_deepspeed_phase(bc, ds_cfg, prompts, eos, device, deadline)
        except Exception as exc:  # e.g. the TP degree does not fit the model: a row, not an abort
            ds = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
        finish(bc, result, probe, prompts, ours, ds, {}, {}, t_start, write_doc=False)
    hf = peers.run_hf_phase(bc, probe, prompts, eos, device, deadline)
    compiled: dict[str, Any] = {}
    if any(p in wl.peers for p in COMPILED_PEERS):
        # the chain's gamma (spec=chain) where there is a draft; a target-only workload runs the autoregressive peers
        peer_cfg = probe if probe.model.draft is None else compose_experiment([*base, "spec=chain",
                                                                                "run_name=bench_compiled_peers"])
        profiles: dict[str, Any] | None = None
        if bc.profile_steps:
            profiles = result["kernel_profiles"] = {}  # filled in place by the phase, written with each finish
        compiled = run_compiled_phase(
            bc, peer_cfg, prompts, eos, device, deadline,
            on_result=lambda so_far: finish(bc, result, probe, prompts, ours, ds, hf, {}, t_start, write_doc=False,
                                            compiled=so_far), profiles=profiles)
    checks: dict[str, Any] = {}
    if wl.check_outputs:
        outputs = output_sets(ours, ds, hf, compiled)
        reference = next((f"{s}/{m}" for s, m in REFERENCES if f"{s}/{m}" in outputs), None)
        if reference is None:
            result["notes"].append("outputs not checked: no greedy transformers reference ran")
        else:
            checks = peers.run_checks(probe, prompts, device, reference, outputs)
    return finish(bc, result, probe, prompts, ours, ds, hf, checks, t_start, write_doc=True, compiled=compiled)


def output_sets(ours: dict[str, Any], ds: dict[str, Any] | None, hf: dict[str, Any],
                compiled: dict[str, Any]) -> dict[str, list[list[int]]]:
    """{"<system>/<mode>" (deepspeed: "deepspeed"): the last repeat's tokens} of every system that ran."""
    out = {f"transformers/{m}": hf[p]["repeats"][-1]["outputs"] for p, m in (("hf_greedy", "greedy"),
                                                                             ("hf_assisted", "assisted"))
           if "repeats" in hf.get(p, {})}
    out.update({k: r["repeats"][-1]["outputs"] for k, r in compiled.items() if "repeats" in r})
    out.update({f"{OURS}/{m}": r["repeats"][-1]["outputs"] for m, r in ours.items() if "repeats" in r})
    if ds is not None and "repeats" in ds:
        out["deepspeed"] = ds["repeats"][-1]["outputs"]
    return out


def finish(bc: BenchRuntimeConfig, result: dict[str, Any], cfg: Any, prompts: list[list[int]], ours: dict[str, Any],
           ds: dict[str, Any] | None, hf: dict[str, Any], checks: dict[str, Any], t_start: float,
           write_doc: bool, compiled: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rows + tables into `result`; write the JSON (and, if asked and anything was measured, the doc section).
    With compiled peers, `comparison` (`peer_comparison`) and its `comparison_table` too."""
    rows = build_rows(bc, cfg, prompts, ours, ds, hf, checks, compiled)
    result["rows"], result["table"] = rows, markdown_table(rows)
    if compiled:
        result["comparison"] = peer_comparison(rows)
        result["comparison_table"] = comparison_table(result["workload"], result["comparison"])
    result["wall_s"] = round(time.time() - t_start, 1)
    bad = [f"{k}: {c['status']}" for k, c in checks.items() if c["status"] == "error"]
    if bad:
        result["notes"].append("OUTPUT MISMATCH beyond the tie epsilon (a losslessness bug): " + "; ".join(bad))
    atomic_write_json(Path(result["json"]), result)
    if write_doc and bc.doc and any(r["status"] == "ok" for r in rows):
        doc = Path(bc.doc)
        atomic_write_text(doc, (doc.read_text() if doc.is_file() else "# Runtime benchmarks\n") + "\n"
                          + doc_section(result))
    return result


def print_summary(result: dict[str, Any]) -> None:
    """Human-readable lines, one JSON summary line, and the markdown table last."""
    for r in result["rows"]:
        extra = f" ({r['status']}: {str(r.get('reason')).splitlines()[0][:160]})" if r["status"] != "ok" else ""
        print(f"[bench] {r['system']:<12} {r['mode']:<15} tok/s {_num(r['tokens_per_s']):>7}{extra}", flush=True)
    for note in result["notes"]:
        print(f"[bench] note: {note}")
    if result.get("comparison_table"):
        print(result["comparison_table"])
    counts = {s: sum(r["status"] == s for r in result["rows"]) for s in ("ok", "error", "skipped")}
    checks = {f"{r['system']}/{r['mode']}": r["outputs_check"]["status"] for r in result["rows"] if r["outputs_check"]}
    print(json.dumps({"json": result["json"], "workload": result["workload"], "wall_s": result["wall_s"],
                      **counts, "checks": checks}))
    print(result["table"], flush=True)


@hydra.main(version_base="1.3", config_path="../conf", config_name="bench_runtime")
def main(cfg: DictConfig) -> None:
    """Compose -> validate/freeze -> run every phase -> print the summary and the table."""
    bc = build_bench_config(cfg)
    result = run_bench(bc, Path(HydraConfig.get().runtime.output_dir), " ".join(["bench/bench_runtime.py",
                                                                                 *sys.argv[1:]]))
    print_summary(result)


if __name__ == "__main__":
    main()
