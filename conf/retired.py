"""Config fields that were removed, in one list, and how recorded configs that hold them still load.

A recorded run dir's config.json (conf/rundir.py) holds every field its commit's schema had. When a switch is deleted
(the A/B that decided it is in docs/LOG.md), its field goes from the schema and gets one `RETIRED` entry: the values a
recorded config may hold for it, and why it went. Those values describe the path a run took that the code still runs,
or the path that was the default until the kept one replaced it (such a run measured that path: its numbers stay
results, the switch does not come back). A field whose number moved out of the config (into a named constant of the
code that uses it, a preset or the profile) names where it went (`replacement`). Reading a recorded config
(`strip_retired`, called by `conf.rundir.config_from_dict`) drops an accepted value and refuses any other one with an
error naming the field. A field that moved inside the schema (`MOVED`, e.g. `sim.draft_host_scale` to
`sim.whatif.draft_host_scale`) is carried to its new place. A command-line override of a retired or moved field
(`python generate.py spec.presend=true`), or of a key inside one, fails with one line naming it and its replacement
(`check_overrides`), and so does an override key or group option that a preset or list replaced (`REPLACED`,
e.g. `kernels.skinny=false`; recorded configs' kernels switches map to a preset and an ablation list in
conf.kernels_config.kernels_from_recorded).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from conf.frozen import ConfigError


@dataclass(frozen=True)
class Retired:
    """One removed field: the values a recorded config may still hold for it, and why it went."""

    accepted: tuple[Any, ...] | None
    """None: any value (the field chose nothing the code no longer runs, e.g. a count the code now derives)."""
    why: str
    replacement: str = ""
    """Where its number or its choice went (a constant, a preset field, the profile), named by an override's error."""


@dataclass(frozen=True)
class Moved:
    """A field that moved inside the schema: its new dotted name, and how a recorded value converts (identity when
    None)."""

    to: str
    convert: Callable[[Any], Any] | None = None


_ZERO = (0, 0.0)
_LOOPS = "replaced by the calibrated profile's runtime.loops"

RETIRED: dict[str, Retired] = {
    "spec.presend": Retired((False,), "conditional proposals sent ahead of the verdict cost the target more time "
                            "than they saved"),
    "spec.reroot_prefetch": Retired((0,), "re-roots prepared while the draft waits gained nothing measurable"),
    "parallel.recv_wake": Retired(("socket",), "a receive spinning on shared send counters decoded no faster"),
    "spec.oracle_draws": Retired(("uniform",), "the oracle draws every rank from batched uniforms, 20x faster"),
    # pageable / sync: the defaults a recorded run took before the graph-staged, spin read-back path replaced them
    "kernels.input_staging": Retired(("graph", "pageable"), "CUDA graphs always copy their own inputs from pinned "
                                     "memory"),
    "kernels.readback": Retired(("spin", "sync"), "CUDA graphs always copy their small outputs to the host, which "
                                "spins on them"),
    "kernels.verdict_graph": Retired((False,), "a greedy verify graph always computes its verdict"),
    "sim.runtime_delta.colocated_step_extra_s": Retired(_ZERO, _LOOPS),
    "sim.runtime_delta.colocated_expand_extra_s": Retired(_ZERO, _LOOPS),
    "sim.runtime_delta.colocated_expand_extra_per_real_row_s": Retired(_ZERO, _LOOPS),
    # kernels group (issue 49): a recorded true is a simulated run (the runtime refused it) that the simulator priced
    # as the graphs preset: it never read the switch
    "kernels.fused_allreduce": Retired((False, True), "the simulator never priced the fused GEMM + all-reduce and "
                                       "the runtime does not run it",
                                       "sim.whatif.fused_allreduce (a simulator what-if)"),
    "kernels.pdl_policy": Retired(({"gemm": "default", "small": "default", "pre_attention": "default",
                                    "norm": "default"},),
                                  "the PDL trigger per kernel role is kernels/pdl.py's DEFAULT_POLICY; a benchmark "
                                  "passes another to kernels.pdl.pdl"),
    # issue 49: sim / parallel / model / hardware / interconnect / trace fields
    "trace.per_operator": Retired((False,), "no code read it"),
    "sim.max_iterations": Retired((1_000_000,), "a safety bound, not a setting",
                                  "simulator/processes.py MAX_ITERATIONS"),
    "sim.pilot_tokens": Retired((128,), "a method constant of sim.d_rule=best_of_two",
                                "simulator/simulation.py PILOT_TOKENS"),
    "sim.step_overhead_s": Retired((3.0e-5,), "a host constant of the analytic prior",
                                   "simulator/cost_model.py PRIOR_STEP_OVERHEAD_S"),
    "sim.eager_prefill_launch_s": Retired((9.0e-5,), "a host constant measured on the H200 host",
                                          "simulator/cost_model.py EAGER_PREFILL_LAUNCH_S"),
    # a recorded value was the prior's or, in validation replays, the calibration report's: the profile holds it now
    "sim.tree_op_s": Retired(None, "a measured host cost", "the profile's tree_op_s (calibrate.py writes it), "
                             "else simulator/cost_model.py PRIOR_TREE_OP_S"),
    "interconnect.host_overhead_s": Retired((2.0e-5,), "a host constant of the analytic prior",
                                            "simulator/cost_model.py PRIOR_MESSAGE_HOST_S"),
    # any recorded seed loads: only a runtime run builds weights, and a recorded config is replayed by the simulator
    "model.target.seed": Retired(None, "random weights derive from the run's seed", "seed"),
    "model.draft.seed": Retired(None, "random weights derive from the run's seed (a draft of the target's preset is "
                                "the target itself)", "seed"),
    "parallel.recv_spin_ms": Retired((None,), "its auto value won", "runtime/unix_channel.py GPU_RECV_SPIN_S / "
                                     "CPU_RECV_SPIN_S"),
    "parallel.cpu_affinity": Retired(("off",), "pinning ranks to cores measured neutral"),
    "parallel.host_threads": Retired((0,), "1 and 16 threads per GPU rank measured the same",
                                     "runtime/launch.py host_threads (OMP_NUM_THREADS still applies)"),
    "parallel.gc": Retired(("freeze",), "the collector is always frozen around the decode loop, "
                           "runtime/gc_policy.py"),
    "hardware.gpus_per_node": Retired((8,), "a property of the GPU's node", "conf/presets.py GpuSpec.gpus_per_node"),
    "sim.record_events": Retired(None, "the simulator keeps its event log when it writes traces", "trace.enabled"),
    # model: the default until every oracle run (validation, benchmarks) grew its tree by the table's belief
    "spec.oracle_belief": Retired(("table", "model"), "an oracle run's draft grows its tree by the acceptance "
                                  "table's belief, as the simulator's does"),
    "hardware.num_nodes": Retired(None, "nodes follow from the split (ranks fill the GPU preset's nodes in order)"),
}
"""Dotted field name -> what a recorded config may hold for it. docs/LOG.md has the number behind each removal."""


def _nonzero(deltas: Any) -> Any:
    return {k: v for k, v in deltas.items() if v != 0} if isinstance(deltas, dict) else deltas


MOVED: dict[str, Moved] = {
    # issue 49: the simulator's what-ifs in one sub-config
    "sim.draft_host_scale": Moved("sim.whatif.draft_host_scale"),
    "sim.draft_device_scale": Moved("sim.whatif.draft_device_scale"),
    "sim.runtime_delta": Moved("sim.whatif.runtime_delta", _nonzero),  # a mapping now: its zeros change nothing
}
"""Old dotted field name -> where it lives now."""


_ABLATE = "kernels=graphs with kernels.ablate=[{}]"

REPLACED: dict[str, str] = {
    # kernels group (issue 49): recorded configs' switches map to a preset and an ablation list
    # (conf.kernels_config.kernels_from_recorded)
    "kernels.backend": "the preset: kernels=reference (torch) or kernels=triton / kernels=graphs (Triton)",
    "kernels.cuda_graphs": "kernels=graphs (CUDA graphs on) or kernels=triton (eager Triton steps)",
    "kernels.skinny": _ABLATE.format("skinny,target_qkv_rope"),  # target_qkv_rope needs skinny
    **{f"kernels.{name}": _ABLATE.format(name) for name in ("pdl", "rope_attention", "draft_head")},
    "kernels.target_qkv_rope": _ABLATE.format("target_qkv_rope"),
    "kernels.refill_graph": _ABLATE.format("refill_graph"),
    "kernels.prefill_graph": _ABLATE.format("prefill_graph"),
    "kernels=triton_graphs": "kernels=graphs (the fused GEMM + all-reduce: the simulator what-if "
                             "sim.whatif.fused_allreduce=true)",
}
"""An override key (`group.field`) or group option (`group=option`) that moved -> what replaces it; `check_overrides`
refuses it with one line naming the replacement ("kernels.pdl: now kernels=graphs with kernels.ablate=[pdl]")."""


def strip_retired(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a recorded config's `config` object without its retired fields (the caller's dict is not changed).
    Raises ValueError naming the field when one holds a value the code no longer runs (the run took a removed
    experiment path)."""
    out = copy.deepcopy(data)
    for name, retired in RETIRED.items():
        found, value = _pop(out, name)
        if not found or retired.accepted is None:
            continue
        if not _same(value, retired.accepted):
            raise ValueError(f"{name}: removed ({retired.why}); this recorded config holds {value!r}, which the code "
                             f"no longer runs (accepted: {', '.join(map(repr, retired.accepted))})")
    for name, moved in MOVED.items():
        found, value = _pop(out, name)
        if not found:
            continue
        *new_parents, new_leaf = moved.to.split(".")
        target = out
        for key in new_parents:
            target = target.setdefault(key, {})
        target[new_leaf] = moved.convert(value) if moved.convert else value
    return out


def _pop(data: dict[str, Any], name: str) -> tuple[bool, Any]:
    """Remove the dotted field `name` from the nested dict `data`: (whether it was there, its value)."""
    *parents, leaf = name.split(".")
    node: Any = data
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
        return False, None
    return True, node.pop(leaf)


def _owner(key: str, table: dict[str, Any]) -> str | None:
    """`key` or the nearest of its dotted parents that `table` holds, else None."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in table:
            return ".".join(parts[:n])
    return None


def check_overrides(overrides: Iterable[str]) -> None:
    """Raise ValueError naming the first Hydra override (`key=value`, `+key=value`, `~key`) of a retired or moved
    field, or of a key inside one, and what replaces it; ConfigError for an override key or group option in REPLACED."""
    for arg in overrides:
        choice = arg.lstrip("+~").strip()
        key = choice.split("=", 1)[0].strip()
        if choice in REPLACED or key in REPLACED:
            name = choice if choice in REPLACED else key
            raise ConfigError(f"{name}: now {REPLACED[name]} (docs/CONFIG.md)")  # a user error, "=" in the name
        name = _owner(key, RETIRED)
        if name is not None:
            r = RETIRED[name]
            instead = f"replaced by {r.replacement}" if r.replacement else "drop the override"
            raise ValueError(f"{key}: removed ({r.why}; docs/LOG.md); {instead}")
        name = _owner(key, MOVED)
        if name is not None:
            new = MOVED[name].to + key[len(name):]
            raise ValueError(f"{key}: moved to {new}; write +{new}=... for a key of a mapping" if new != MOVED[name].to
                             else f"{key}: moved to {new}")


def drop_retired_overrides(overrides: Iterable[str]) -> list[str]:
    """A recorded override list (a benchmark result's experiment overrides) without the overrides of retired fields
    that set a value the code now always runs (`spec.oracle_belief=table`); any other override of a retired field
    stays, so that replaying it fails naming the field."""
    import yaml

    out = []
    for arg in overrides:
        key, _, value = arg.lstrip("+").partition("=")
        retired = RETIRED.get(key.strip())
        if retired is not None and (retired.accepted is None
                                    or _same(_number(yaml.safe_load(value)), retired.accepted)):
            continue
        out.append(arg)
    return out


def _number(value: Any) -> Any:
    """An override's YAML value, with a string that spells a number (`3e-5`: a string to YAML) as that number."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def _same(value: Any, accepted: tuple[Any, ...]) -> bool:
    """Whether `value` is one of `accepted`, a bool only equal to a bool (False is not the accepted 0)."""
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in accepted)
