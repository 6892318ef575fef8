"""Metrics of a finished simulation: the metrics contract figure scripts read, and a human summary table.

Contract (metrics.json; `metrics_of`):

| key                       | meaning                                                                     |
|---------------------------|-----------------------------------------------------------------------------|
| source                    | "sim"                                                                       |
| mode, model               | spec.mode; model pair name (model.name)                                     |
| target_gpus, draft_gpus   | the GPU split                                                               |
| bs, w, d, gamma           | verify width, draft width, expansions per round used (chain: gamma, AR: 0)  |
| interconnect, gpu         | interconnect.name, hardware.gpu                                             |
| acceptance_scale, oracle  | acceptance.scale; false (the simulator has no oracle)                       |
| num_requests              | requests simulated                                                          |
| generated_tokens          | tokens emitted (= num_requests x max_new_tokens)                            |
| wall_s                    | simulated time until the last request's last verify ends, prefill included |
| tokens_per_s              | generated_tokens / wall_s                                                   |
| time_per_output_token_s   | (wall_s - prefill_s) / generated_tokens (decode only)                       |
| iterations                | verify steps (AR: forwards)                                                 |
| iteration_time_s          | mean target cycle per iteration (wait for proposal + verify)                |
| verify_time_s             | mean verify step                                                            |
| expand_time_s             | mean draft forward (null without a draft)                                   |
| mean_accept_len           | tokens per verify incl. the bonus, before the max_new_tokens cap            |
| accept_len_hist           | {"1": count, "2": ...} of the same                                          |
| hit_rate                  | re-root hits / re-roots (null for autoregressive and chain)                 |
| busy_fraction             | {"target": busy / wall, "draft": busy / wall} (draft null without a draft)  |

Extra keys (not in the contract): seed, prefill_s, cost_model, acceptance_kind, d_rule, acceptance_top1 (the
draft's top-1 acceptance at depth 0 of the acceptance model drawn from, scale included; null for a replay: the
draft strength figures plot against, analysis/fig01_gpu_split.py and fig02_acceptance.py).
"""

from __future__ import annotations

from typing import Any

from conf.schema import ExperimentConfig
from policy.acceptance import load_acceptance
from simulator.records import Tally


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


def metrics_of(config: ExperimentConfig, tally: Tally, d: int, cost_source: str) -> dict[str, Any]:
    """The metrics dict of one finished simulation (keys in contract order, then extras)."""
    spec, par = config.spec, config.parallel
    mode = spec.mode
    wall = tally.wall_s
    has_draft = mode != "autoregressive"
    # The draft's last forwards may run past the end (cut short by the stop): count busy time up to wall_s.
    draft_busy = tally.draft_busy_s - max(0.0, tally.draft_busy_end_s - wall)
    verifies = tally.verifies
    tokens_per_verify = sum(k * n for k, n in tally.accept_hist.items())
    return {
        "source": "sim",
        "mode": mode,
        "model": config.model.name,
        "target_gpus": par.target_gpus,
        "draft_gpus": par.draft_gpus,
        "bs": spec.gamma + 1 if mode == "chain" else spec.bs,
        "w": 1 if mode == "chain" else spec.w,
        "d": d,
        "gamma": spec.gamma,
        "interconnect": config.interconnect.name,
        "gpu": config.hardware.gpu,
        "acceptance_scale": config.acceptance.scale,
        "oracle": False,
        "num_requests": config.workload.num_requests,
        "generated_tokens": tally.generated_tokens,
        "wall_s": wall,
        "tokens_per_s": tally.generated_tokens / wall if wall > 0 else None,
        "time_per_output_token_s": (wall - tally.prefill_s) / tally.generated_tokens if tally.generated_tokens
        else None,
        "iterations": verifies,
        "iteration_time_s": _mean(wall - tally.prefill_s, verifies),
        "verify_time_s": _mean(tally.verify_s, verifies),
        "expand_time_s": _mean(tally.expand_s, tally.draft_forwards) if has_draft else None,
        "mean_accept_len": _mean(tokens_per_verify, verifies),
        "accept_len_hist": {str(k): tally.accept_hist[k] for k in sorted(tally.accept_hist)},
        "hit_rate": _mean(tally.hits, tally.reroots) if mode in ("serial_tree", "async_tree") else None,
        "busy_fraction": {"target": tally.target_busy_s / wall if wall > 0 else None,
                          "draft": draft_busy / wall if has_draft and wall > 0 else None},
        "seed": config.seed,
        "prefill_s": tally.prefill_s,
        "cost_model": cost_source,
        "acceptance_kind": config.acceptance.kind,
        "d_rule": "poll" if spec.d_poll else config.sim.d_rule if spec.d_fixed is None else "fixed",
        "acceptance_top1": None if config.acceptance.kind == "replay" else
        load_acceptance(config.acceptance, 1).table[0][0],
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items())
    return str(v)


def summary_table(metrics: dict[str, Any]) -> str:
    """A human-readable table of the headline metrics; every time in it is simulated time."""
    keys = [
        ("scenario", f"{metrics['mode']} {metrics['model']} {metrics['target_gpus']}x{metrics['draft_gpus']} "
                     f"{metrics['gpu']} {metrics['interconnect']}"),
        ("bs / w / d / gamma", f"{metrics['bs']} / {metrics['w']} / {metrics['d']} / {metrics['gamma']}"),
        ("cost model", metrics["cost_model"]),
        ("tokens/s (simulated time)", metrics["tokens_per_s"]),
        ("time per output token (ms)", (metrics["time_per_output_token_s"] or 0.0) * 1e3),
        ("generated tokens", metrics["generated_tokens"]),
        ("simulated time (s)", metrics["wall_s"]),
        ("iterations", metrics["iterations"]),
        ("iteration time (ms)", (metrics["iteration_time_s"] or 0.0) * 1e3),
        ("verify time (ms)", (metrics["verify_time_s"] or 0.0) * 1e3),
        ("draft forward (ms)", None if metrics["expand_time_s"] is None else metrics["expand_time_s"] * 1e3),
        ("mean accept len", metrics["mean_accept_len"]),
        ("hit rate", metrics["hit_rate"]),
        ("busy fraction", metrics["busy_fraction"]),
    ]
    width = max(len(k) for k, _ in keys)
    return "\n".join(f"{k:<{width}}  {_fmt(v)}" for k, v in keys)
