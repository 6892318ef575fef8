"""A measured runtime run as a simulator run: its config with the profile and a replay of its verify outcomes
(`sim_config`), the belief the replayed tree grows by (`replay_belief_of`), and the draft ranks of runs recorded
before iterations.csv had its `ranks` column (`with_oracle_ranks`). Used by calibration/validate.py compare."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from conf.rundir import atomic_write_json, config_from_dict


def sim_config(config: Any, profile: str | None, acceptance_file: str | None,
               replay_belief: str = "geometric", d_rule: str | None = None, **workload: int) -> Any:
    """A simulator config of a measured run: same everything, the profile, replayed acceptance if given
    (its tree grown by `replay_belief`), `workload` fields replaced (the measured prompt length and output of
    text-prompt runs)."""
    from conf.schema import freeze

    data = json.loads(json.dumps(dataclasses.asdict(config)))  # plain, unfrozen copy
    data.pop("_frozen", None)
    cfg = config_from_dict(data)
    for key, value in workload.items():
        setattr(cfg.workload, key, value)
    if acceptance_file is not None:
        if cfg.acceptance.kind == "positional" and cfg.acceptance.file is not None:
            # the replay takes the file field: keep the run's table inline (replay_belief=table grows by it)
            from policy.acceptance import load_acceptance

            cfg.acceptance.positional = load_acceptance(cfg.acceptance, 1).raw
        # the replay file replaces the report: its domain (acceptance.domain) went into the inline table above
        cfg.acceptance.kind, cfg.acceptance.file, cfg.acceptance.domain = "replay", acceptance_file, None
        cfg.acceptance.replay_belief = replay_belief
    cfg.sim.profile = profile
    if d_rule is not None:
        cfg.sim.d_rule = d_rule
    cfg.trace.enabled = False  # the comparison reads metrics and iterations.csv; no per-step traces
    cfg.parallel.device = "auto"
    cfg.validate()
    return freeze(cfg)


def recorded_serial_d(config: Any, measured: dict[str, Any]) -> int | None:
    """The d a recorded serial_tree run with d auto is replayed at; None: any other run, or one whose d the runtime's
    tuner chose (`d_rule` runtime: the replay runs the tuner, `sim.d_rule=runtime`).

    A runtime record without `d_rule` predates the serial depth tuner: it ran the breadth rule ceil((bs - 1) / w)
    (policy.depth_tuner.breadth_d), so a replay simulates the run it was rather than today's auto d. A simulator
    record (`d_rule` round or best_of_two) ran its `d`, the d it resolved."""
    from policy.depth_tuner import breadth_d

    spec = config.spec
    if spec.mode != "serial_tree" or str(spec.d) != "auto" or measured.get("d_rule") == "runtime":
        return None
    if "d_rule" not in measured:
        return breadth_d(spec.bs, spec.w)
    return int(measured["d"])


def with_oracle_ranks(run_dir: Path, config: Any, measured: dict[str, Any], out_dir: Path) -> Path | None:
    """A positional-oracle run recorded without iterations.csv `ranks`: its verifies with the draft ranks the
    oracle drew, reconstructed from the run's seed (runtime.oracle.reconstruct_ranks, with the multinomial draws
    of those runs: the ranks column is older than the uniform draws), as a replay JSON `out_dir/<run>.json`; None
    when the run has ranks, is not such a run, or its stream does not match."""
    from policy.acceptance import read_replay_csv
    from runtime.oracle import MULTINOMIAL, reconstruct_ranks

    if not measured.get("oracle") or config.acceptance.kind != "positional" or config.spec.mode == "autoregressive":
        return None  # (an autoregressive run never draws from the oracle, whatever spec.oracle says)
    rows = read_replay_csv(str(run_dir / "iterations.csv"))
    if not rows or "ranks" in rows[0]:
        return None
    verifies: list[dict[str, Any]] = []
    for request in sorted({r["request"] for r in rows}):
        recorded = [(r["accepted"], bool(r["hit"])) for r in rows if r["request"] == request]
        try:
            ranks = reconstruct_ranks(config.acceptance, config.workload.seed, request, recorded, MULTINOMIAL)
        except ValueError as e:
            print(f"[validate] {run_dir.name}: no ranks reconstructed ({e}); replaying accepted counts only")
            return None
        verifies += [{"accepted": a, "hit": h, "ranks": r} for (a, h), r in zip(recorded, ranks)]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{run_dir.name}.json"
    atomic_write_json(path, {"verifies": verifies, "source": f"{run_dir}/iterations.csv + the oracle's seed"})
    return path


def replay_belief_of(measured: dict[str, Any], config: Any) -> str:
    """The belief a replay of this measured run grows its simulated tree by, i.e. what the runtime's draft grew
    by: table (an oracle run with spec.oracle_belief=table: the config's acceptance table), uniform (a
    random-weight draft without a checkpoint: flat top-k log-probs, a breadth-first tree), else geometric."""
    if measured.get("oracle") and measured.get("oracle_belief") == "table":
        return "table"
    random_draft = measured.get("source") == "runtime" and config.model.draft is not None \
        and not config.model.draft.checkpoint
    return "uniform" if random_draft else "geometric"
