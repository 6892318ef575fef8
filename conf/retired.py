"""Config fields that were removed, in one list, and how recorded configs that hold them still load.

A recorded run dir's config.json (conf/rundir.py) holds every field its commit's schema had. When a switch is deleted
(the A/B that decided it is in docs/LOG.md), its field goes from the schema and gets one `RETIRED` entry: the values a
recorded config may hold for it, and why it went. Those values describe the path a run took that the code still runs,
or the path that was the default until the kept one replaced it (such a run measured that path: its numbers stay
results, the switch does not come back). Reading a recorded config (`strip_retired`, called by
`conf.rundir.config_from_dict`) drops an accepted value and refuses any other one with an error naming the field. A
command-line override of a retired field (`python generate.py spec.presend=true`) fails with one line naming it
(`check_overrides`), and so does one of a field or group option that moved (`MOVED`: the line names the replacement).
An override of a field inside a retired one (`kernels.pdl_policy.norm=late`) is refused as the retired one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from conf.frozen import ConfigError


@dataclass(frozen=True)
class Retired:
    """One removed field: the values a recorded config may still hold for it, and why it went."""

    accepted: tuple[Any, ...]
    why: str


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
                                       "the runtime does not run it"),
    "kernels.pdl_policy": Retired(({"gemm": "default", "small": "default", "pre_attention": "default",
                                    "norm": "default"},),
                                  "the PDL trigger per kernel role is kernels/pdl.py's DEFAULT_POLICY; a benchmark "
                                  "passes another to kernels.pdl.pdl"),
}
"""Dotted field name -> what a recorded config may hold for it. docs/LOG.md has the number behind each removal."""

_ABLATE = "kernels=graphs with kernels.ablate=[{}]"

MOVED: dict[str, str] = {
    # kernels group (issue 49): recorded configs' switches map to a preset and an ablation list
    # (conf.kernels_config.kernels_from_recorded)
    "kernels.backend": "the preset: kernels=reference (torch) or kernels=triton / kernels=graphs (Triton)",
    "kernels.cuda_graphs": "kernels=graphs (CUDA graphs on) or kernels=triton (eager Triton steps)",
    "kernels.skinny": _ABLATE.format("skinny,target_qkv_rope"),  # target_qkv_rope needs skinny
    **{f"kernels.{name}": _ABLATE.format(name) for name in ("pdl", "rope_attention", "draft_head")},
    "kernels.target_qkv_rope": _ABLATE.format("target_qkv_rope"),
    "kernels.refill_graph": _ABLATE.format("refill_graph"),
    "kernels.prefill_graph": _ABLATE.format("prefill_graph"),
    "kernels=triton_graphs": "kernels=graphs (the fused GEMM + all-reduce was never priced or run)",
}
"""An override key (`group.field`) or group option (`group=option`) that moved -> what replaces it; `check_overrides`
refuses it with one line naming the replacement ("kernels.pdl: now kernels=graphs with kernels.ablate=[pdl]")."""


def strip_retired(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a recorded config's `config` object without its retired fields (the caller's dict is not changed).
    Raises ValueError naming the field when one holds a value the code no longer runs (the run took a removed
    experiment path)."""
    out = copy.deepcopy(data)
    for name, retired in RETIRED.items():
        *parents, leaf = name.split(".")
        node: Any = out
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node.pop(leaf)
        if value not in retired.accepted or isinstance(value, bool) != isinstance(retired.accepted[0], bool):
            raise ValueError(f"{name}: removed ({retired.why}); this recorded config holds {value!r}, which the code "
                             f"no longer runs (accepted: {', '.join(map(repr, retired.accepted))})")
    return out


def check_overrides(overrides: Iterable[str]) -> None:
    """Raise ValueError naming the first Hydra override (`key=value`, `+key=value`, `~key`) of a retired field (or a
    field inside one), or of a moved field or group option (MOVED: the message names the replacement)."""
    for arg in overrides:
        choice = arg.lstrip("+~").strip()
        key = choice.split("=", 1)[0].strip()
        if choice in MOVED or key in MOVED:
            name = choice if choice in MOVED else key
            raise ConfigError(f"{name}: now {MOVED[name]} (docs/CONFIG.md)")  # a user error, "=" in the name
        parts = key.split(".")
        for name in (".".join(parts[:i]) for i in range(len(parts), 0, -1)):
            if name in RETIRED:
                raise ValueError(f"{name}: removed ({RETIRED[name].why}; docs/LOG.md); drop the override")
