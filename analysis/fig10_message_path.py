"""Figure 10: where a leader message's time goes, per direction: the hop, the receiver's decode, its bookkeeping.

Input: runtime run dirs with a draft group and traces.jsonl whose unix-channel `comm.recv` spans carry the
arrival marks (`arrive_s`; `decoded_s` since git bf54e5f: runtime/unix_channel.py). For every message whose
receiver was already waiting when the send span ended (`calibration.message_latency.deliveries`), the delivery (send end
-> receive end) splits into the hop (send end -> bytes out of the socket), the decode (bytes out -> message
decoded) and the rest of the receive span (its bookkeeping); medians per direction over the iterations after the
first `skip`, repeats of one configuration averaged.

One panel per direction (draft -> target: proposals; target -> draft: verified paths), stacked bars per
configuration, in microseconds.

Usage: python analysis/fig10_message_path.py RUN_DIR_OR_GLOB... [--skip 10] --out docs/figures/fig10_message_path
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from matplotlib.figure import Figure

from analysis import cli, style
from analysis.fig09_miss_cost import run_label
from analysis.figdata import FigureData, Panel
from analysis.runs import Run, RunDirError, require
from calibration.message_latency import DIRECTIONS, deliveries, receive_parts
from simulator.runtime_fit import leader_spans

SKIP = 10
"""Iterations left out at the start (prefill, first trees, the depth tuner's trials)."""
PARTS = ("hop", "decode", "bookkeeping")
COLOURS = {"hop": "#0072B2", "decode": "#D55E00", "bookkeeping": "#999999"}


def message_parts(run: Run, skip: int = SKIP) -> dict[str, dict[str, float]]:
    """{"<sender>-><receiver>": {"hop_s", "decode_s", "bookkeeping_s", "messages"}} (medians) for one run."""
    spans = leader_spans(run.traces(), skip)
    out: dict[str, dict[str, float]] = {}
    for sender, receiver in DIRECTIONS:
        parts: dict[str, list[float]] = {p: [] for p in PARTS}
        for _, delivery, recv in deliveries(spans.get((sender, "comm.send"), []), spans.get((receiver, "comm.recv"),
                                                                                            [])):
            m = receive_parts(delivery, recv, f"{run.path}: {receiver} comm.recv")
            if m is None:
                raise RunDirError(f"{run.path}: its {receiver} leader's comm.recv spans have no arrival mark "
                                  f"(arrive_s): runs of the unix leader channel since git a3e6e83 have them")
            decode = m["decode"] or 0.0
            parts["hop"].append(m["hop"])
            parts["decode"].append(decode)
            parts["bookkeeping"].append(m["after"] - decode)
        if parts["hop"]:
            out[f"{sender}->{receiver}"] = {**{f"{p}_s": statistics.median(v) for p, v in parts.items()},
                                            "messages": float(len(parts["hop"]))}
    if not out:
        raise RunDirError(f"{run.path}: no message found whose receiver was waiting (after the first {skip} "
                          f"iterations): a run with a draft group and traces is needed")
    return out


@style.styled
def make_figure(runs: Sequence[Run], skip: int = SKIP) -> tuple[Figure, FigureData]:
    """Stacked hop / decode / bookkeeping per configuration, one panel per direction."""
    if not runs:
        raise RunDirError("fig10: no runs given")
    if skip < 0:
        raise RunDirError(f"fig10: --skip must be >= 0, got {skip}")
    require(runs, ("source", "mode", "draft_gpus"))
    measured = [r for r in runs if r.metric("source") == "runtime" and r.metric("draft_gpus")]
    if not measured:
        raise RunDirError(f"fig10: none of the {len(runs)} runs is a runtime run with a draft group "
                          f"(e.g. {runs[0].path})")
    groups: dict[str, list[Run]] = {}
    for r in sorted(measured, key=lambda r: (style.mode_sort_key(str(r.metric("mode"))), str(r.path))):
        groups.setdefault(run_label(r), []).append(r)
    stats = {r.path: message_parts(r, skip) for rs in groups.values() for r in rs}
    panels: dict[str, Panel] = {}
    for sender, receiver in DIRECTIONS:
        key = f"{sender}->{receiver}"
        panel = Panel(xlabel="configuration", ylabel="median per message (us)",
                      title=f"{sender} -> {receiver} ({'proposals' if sender == 'draft' else 'verified paths'})")
        for label, rs in groups.items():
            have = [stats[r.path][key] for r in rs if key in stats[r.path]]
            if not have:
                continue
            for part in PARTS:
                panel.series_for(part).add(label, statistics.fmean(h[f"{part}_s"] for h in have) * 1e6,
                                           run=[str(r.path) for r in rs],
                                           messages=sum(h["messages"] for h in have))
        if skip:
            panel.notes.append(f"first {skip} iterations left out")
        panels[key] = panel
    data = FigureData(title="Where a leader message's time goes", panels=panels)

    fig, axes = style.new_figure(1, 2, panel_height_in=3.0)
    labels = list(groups)
    for ax, panel in zip(axes, panels.values()):
        bottom = [0.0] * len(labels)
        for part in PARTS:
            s = panel.series.get(part)
            if s is None:
                continue
            ys = [s.y[s.x.index(x)] if x in s.x else 0.0 for x in labels]
            ax.bar(range(len(labels)), ys, bottom=bottom, color=COLOURS[part], edgecolor="white", label=part)
            bottom = [b + y for b, y in zip(bottom, ys)]
        tilt = len(labels) > 2
        ax.set_xticks(range(len(labels)), labels, rotation=20 if tilt else 0, ha="right" if tilt else "center")
        ax.set_xlabel(panel.xlabel + (f" ({panel.notes[0]})" if panel.notes else ""))
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title)
    style.legend_below(fig, axes[0])
    fig.suptitle(data.title)
    return fig, data


if __name__ == "__main__":
    raise SystemExit(cli.run_script(make_figure, __doc__, "docs/figures/fig10_message_path", skip=SKIP))
