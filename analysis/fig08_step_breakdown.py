"""Figure 8: where one CUDA-graph decode step's time goes, kernel by kernel, per variant, against its byte floor.

Input: results files of `bench/bench_step_variants.py --profile-kernels N` (data/measured/step_variants_*.json), not
run dirs: each case (model preset, rows) of a file is one panel; each variant one horizontal bar, stacked by the
kernels' exposed time in a replay (calibration.graph_profile: how far each kernel moves the replay's end; these sum to
the replay's span). A kernel is named as the profile names it, "name [grid]", so the skinny GEMM's roles (QKV, o,
down, LM head) stay apart; the panel's largest kernels get their own segment, the rest one "other". A dashed line
marks the byte floor (weights + the context's K/V over 4.29 TB/s), and each bar is labelled with its replay time
(medians of the timed rounds) and its ratio to that floor.

Usage: python analysis/fig08_step_breakdown.py data/measured/step_variants_*.json [--case llama3-8b:1 ...]
           [--top 7] --out docs/figures/fig08_step_breakdown
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from analysis import style
from analysis.figdata import FigureData, Panel
from conf.rundir import atomic_write_json

OTHER = "other"
_NAME = re.compile(r"^_?(?P<name>.*?)(?:_kernel)?(?P<grid> \[.*\])?$")


class StepResultsError(ValueError):
    """A results file that is not what this figure reads; the message names the file and what was expected."""


def kernel_label(profile_name: str) -> str:
    """'_skinny_kernel [96, 1, 1]' -> 'skinny [96, 1, 1]'; torch's long template names cut to their function."""
    if profile_name.startswith("void "):
        base = profile_name[5:].split("<")[0].replace("(anonymous namespace)::", "").split("(")[0].split("::")[-1]
        grid = profile_name[profile_name.rfind(" ["):] if " [" in profile_name else ""
        return f"{base}{grid}"
    m = _NAME.match(profile_name)
    return f"{m.group('name')}{m.group('grid') or ''}" if m else profile_name


def load_cases(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every profiled case of the files: {file, preset, rows, floor_s, variants: {name: {replay_s, kernels}}}."""
    cases = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise StepResultsError(f"{p}: no such file")
        try:
            doc = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise StepResultsError(f"{p}: not JSON ({e})") from None
        if doc.get("benchmark") != "step_variants" or not isinstance(doc.get("results"), list):
            raise StepResultsError(f"{p}: expected a bench/bench_step_variants.py results file "
                                   f"(benchmark 'step_variants' with a 'results' list)")
        for rec in doc["results"]:
            variants = {}
            for name, v in rec.get("variants", {}).items():
                prof = (v.get("kernel_profile") or {}).get("kernels")
                if prof:
                    variants[name] = {"replay_s": v["replay_s"],
                                      "kernels": {kernel_label(k["kernel"]): k["exposed_us"] for k in prof}}
            if variants:
                cases.append({"file": str(p), "git_sha": doc.get("git_sha", "?"), "preset": rec["preset"],
                              "rows": rec["rows"], "floor_s": rec.get("floor_s"), "variants": variants})
    if not cases:
        raise StepResultsError("no case with a kernel profile in the given files (run bench_step_variants.py with "
                               "--profile-kernels N)")
    return cases


def select(cases: list[dict[str, Any]], wanted: Sequence[str]) -> list[dict[str, Any]]:
    """The cases named 'preset:rows' (all when none is named); an unknown one is refused with what exists."""
    if not wanted:
        return cases
    have = {f"{c['preset']}:{c['rows']}": c for c in cases}
    missing = [w for w in wanted if w not in have]
    if missing:
        raise StepResultsError(f"--case {', '.join(missing)}: not among the profiled cases {sorted(have)}")
    return [have[w] for w in wanted]


EXTRA_COLOURS = ("#882255", "#44aa99", "#999933", "#aa4499", "#332288", "#661100")
"""Colours after Okabe-Ito's seven (its black marks the byte floor), for more kernels over all panels (Tol's muted
set)."""


def _largest(case: dict[str, Any], top: int) -> list[str]:
    """The `top` kernels of a case by their largest exposed time in any variant, largest first."""
    peak: dict[str, float] = {}
    for v in case["variants"].values():
        for k, us in v["kernels"].items():
            peak[k] = max(peak.get(k, 0.0), us)
    return sorted(peak, key=lambda k: -peak[k])[:top]


@style.styled
def make_figure(cases: list[dict[str, Any]], top: int = 7) -> tuple[Figure, FigureData]:
    """One panel per case: a stacked bar per variant, exposed us per kernel, the floor as a dashed line."""
    if top < 1:
        raise StepResultsError(f"--top: expected >= 1 kernels per panel, got {top}")
    fig, axes = style.new_figure(len(cases), 1, panel_height_in=0.55 + 0.42 * max(len(c["variants"]) for c in cases))
    data = FigureData(title="decode step by kernel (exposed time in a CUDA-graph replay)")
    # Per panel, the kernels with their own segment are those largest in any one variant (a kernel only one
    # variant launches still shows); one colour per kernel across all panels.
    named_in = [_largest(case, top) for case in cases]
    everywhere = list(dict.fromkeys(k for named in named_in for k in named))
    palette = [c for c in (*style.OKABE_ITO, *EXTRA_COLOURS) if c != "#000000"]  # black: the floor's line
    if len(everywhere) > len(palette):
        raise StepResultsError(f"--top: {len(everywhere)} kernels to colour over all panels, at most "
                               f"{len(palette)}; lower --top or pass fewer --case")
    colours = {**dict(zip(everywhere, palette)), OTHER: "#bbbbbb"}
    for ax, case, named in zip(axes, cases, named_in):
        kernels = {k for v in case["variants"].values() for k in v["kernels"]}
        segments = named + ([OTHER] if len(kernels) > len(named) else [])
        title = f"{case['preset']}, {case['rows']} row{'s' if case['rows'] != 1 else ''} (git {case['git_sha'][:7]})"
        panel = data.panels.setdefault(title, Panel(xlabel="exposed time per step (us)", ylabel="variant",
                                                    title=title))
        names = list(case["variants"])
        for i, name in enumerate(names):
            v = case["variants"][name]
            left = 0.0
            for seg in segments:
                us = (sum(t for k, t in v["kernels"].items() if k not in named) if seg == OTHER
                      else v["kernels"].get(seg, 0.0))
                ax.barh(i, us, left=left, color=colours[seg], edgecolor="white", linewidth=0.4,
                        label=seg if i == 0 else None)
                panel.series_for(seg).add(name, us)
                left += us
            floor = case["floor_s"]
            ratio = f" ({v['replay_s'] / floor:.3f}x)" if floor else ""
            ax.text(left, i, f" {v['replay_s'] * 1e3:.3f} ms{ratio}", va="center", fontsize=6)
            panel.series_for("replay_us").add(name, v["replay_s"] * 1e6)
        if case["floor_s"]:
            ax.axvline(case["floor_s"] * 1e6, color="#000000", linestyle="--", linewidth=0.8, label="byte floor")
            panel.notes.append(f"byte floor {case['floor_s'] * 1e3:.3f} ms")
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        ax.set_xlabel(panel.xlabel)
        ax.set_title(title, loc="left")
        ax.set_xlim(0, max(sum(v["kernels"].values()) for v in case["variants"].values()) * 1.25)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=5, frameon=False)
    return fig, data


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", help="bench/bench_step_variants.py results files (--profile-kernels)")
    p.add_argument("--case", action="append", default=[], metavar="PRESET:ROWS", help="only these cases")
    p.add_argument("--top", type=int, default=7, help="kernels per panel with their own segment")
    p.add_argument("--out", default="docs/figures/fig08_step_breakdown", help="output stem, no extension")
    a = p.parse_args(argv)
    try:
        fig, data = make_figure(select(load_cases(a.results), a.case), top=a.top)
    except StepResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    paths = style.save_figure(fig, a.out)
    json_path = Path(str(a.out) + ".json")
    atomic_write_json(json_path, data.to_dict())
    os.chmod(json_path, 0o644)
    paths.append(json_path)
    print(json.dumps({"figure": str(a.out), "cases": len(data.panels), "files": [str(x) for x in paths]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
