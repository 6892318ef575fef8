"""Markdown table of kernel benchmark results: `python bench/kernels_table.py RESULTS.json... > table.md`.

One row per (section, shape), one column per provider (microseconds, median), plus the achieved share of
the HBM ceiling for the Triton graph variant where the benchmark computed it. Later files override earlier
ones for the same (section, shape, provider), so a re-run section supersedes an older run.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict


def load_rows(paths: list[str]) -> tuple[OrderedDict, list[str]]:
    """(section, shape) -> {provider: row}, and the provider names in first-seen order."""
    table: OrderedDict = OrderedDict()
    providers: list[str] = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for row in data["rows"]:
            if "provider" not in row or "us" not in row:
                continue
            table.setdefault((row["section"], row["shape"]), {})[row["provider"]] = row
            if row["provider"] not in providers:
                providers.append(row["provider"])
    return table, providers


def render(table: OrderedDict, providers: list[str]) -> str:
    """Markdown: one table per section, microseconds per provider, % of HBM peak of the best Triton variant."""
    out = []
    for section in OrderedDict.fromkeys(s for s, _ in table):
        rows = [(shape, cells) for (s, shape), cells in table.items() if s == section]
        cols = [p for p in providers if any(p in c for _, c in rows)]
        out.append(f"\n#### {section}\n")
        out.append("| shape | " + " | ".join(f"{c} (us)" for c in cols) + " | best Triton % of HBM |")
        out.append("|---" * (len(cols) + 2) + "|")
        for shape, cells in rows:
            us = [f"{cells[c]['us']:.1f}" if c in cells else "" for c in cols]
            ours = [cells[c] for c in cells if c.startswith(("triton", "symm_mem", "ll", "fused"))]
            best = min(ours, key=lambda r: r["us"]) if ours else None
            pct = f"{best['pct_peak']:.0f}%" if best and best.get("pct_peak") is not None else ""
            out.append(f"| {shape} | " + " | ".join(us) + f" | {pct} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(*load_rows(sys.argv[1:])))
