"""The comparison's table, for a user's runs: measured, simulated and error per metric and run, in both acceptance
views, the error summary and the decision agreement (`python -m calibration.validate compare --out DIR` writes
DIR/validation.md and prints the same). docs/VALIDATION.md's longer form (method, known limits): validation_doc.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conf.rundir import atomic_write_text


def pct(x: float | None) -> str:
    """A relative error as a signed percentage, "-" when missing."""
    return "-" if x is None else f"{100 * x:+.1f}%"


def fmt(x: float | None, scale: float = 1.0, digits: int = 2) -> str:
    """x * scale with `digits` decimals, "-" when missing."""
    return "-" if x is None else f"{x * scale:.{digits}f}"

METRICS = (("tokens_per_s", "tok/s", 1.0, 1), ("iteration_time_s", "iter ms", 1e3, 2),
           ("verify_time_s", "verify ms", 1e3, 2), ("expand_per_forward_s", "draft fwd ms", 1e3, 3),
           ("mean_accept_len", "accept", 1.0, 2))
"""(row key, column label, scale, digits) of the replayed view's metrics."""


def _cells(cmp: dict[str, Any], scale: float, digits: int) -> list[str]:
    return [fmt(cmp["measured"], scale, digits), fmt(cmp["simulated"], scale, digits), pct(cmp["error"])]


def agreement_lines(da: dict[str, Any], view: str) -> list[str]:
    """A decision agreement (calibration/agreement.py) as text: the count, then one line per flipped pair."""
    if not da["pairs"]:
        return [f"Decision agreement ({view}): no pair of configurations of one model pair, GPU and workload."]
    lines = [f"Decision agreement ({view}): {da['agreed']} of {da['pairs']} pairs of configurations ordered as "
             f"measured ({100 * da['agreed'] / da['pairs']:.0f}%), {len(da['flipped'])} flipped."]
    for f in da["flipped"]:
        lines.append(f"- flipped: {f['faster']} measured {pct(f['measured_gap'])} faster than {f['slower']} "
                     f"({fmt(f['measured'][0], 1, 1)} vs {fmt(f['measured'][1], 1, 1)} tok/s), simulated "
                     f"{fmt(f['simulated'][0], 1, 1)} vs {fmt(f['simulated'][1], 1, 1)} (errors {pct(f['errors'][0])}, "
                     f"{pct(f['errors'][1])})")
    return lines


def table_lines(result: dict[str, Any]) -> list[str]:
    """The markdown table and the summaries of a comparison result (calibration/compare.py)."""
    head = ["run", "mode", "split", "bs", "w", "d (cfg/meas/sim)"]
    for _, label, _, _ in METRICS:
        head += [f"{label} meas", "sim", "err"]
    head += ["tok/s sim (predicted acceptance)", "err", "accept sim (predicted)", "err"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        d = f"{r['d_config']}/{'-' if r.get('d_measured') is None else r['d_measured']}/{r['d_used']}"
        cells = [r["name"], r["mode"], r["split"], str(r["bs"]), str(r["w"]), d]
        for key, _, scale, digits in METRICS:
            cells += _cells(r[key], scale, digits)
        p = r["predicted_acceptance"]
        cells += _cells(p["tokens_per_s"], 1.0, 1)[1:] + _cells(p["mean_accept_len"], 1.0, 2)[1:]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| metric | view | runs | median abs error | max abs error |", "|---|---|---|---|---|"]
    for view, summary in (("replayed acceptance", result["summary"]),
                          ("predicted acceptance", result["summary_predicted_acceptance"])):
        for key, m in summary.items():
            if m.get("n"):
                lines.append(f"| {key} | {view} | {m['n']} | {100 * m['median_abs_error']:.1f}% | "
                             f"{100 * m['max_abs_error']:.1f}% |")
    lines += ["", "Replayed acceptance: each run's own verify outcomes, so its error is the timing model's. Predicted "
              "acceptance: the table or family the run's config names, so the difference is the acceptance model's.",
              ""]
    lines += agreement_lines(result["decision_agreement"], "replayed acceptance")
    lines += [""] + agreement_lines(result["decision_agreement_predicted_acceptance"], "predicted acceptance")
    if result.get("errors"):
        lines += ["", "Not simulated: " + "; ".join(f"{e['name']}: {e['error']}" for e in result["errors"])]
    return lines


def write_table(path: Path, result: dict[str, Any]) -> None:
    """DIR/validation.md: where the numbers come from, then `table_lines`."""
    lines = ["# Measured vs simulated", "",
             f"Runs {result['runs']}, simulated {result['date']} at git {result['git_sha']} from profile "
             f"`{result['profile']}` ({result.get('profile_cost_model') or 'analytic prior'}); {result['held_out']}. "
             f"Raw numbers: `{result['json']}`.", "", *table_lines(result)]
    atomic_write_text(path, "\n".join(lines) + "\n")


def print_table(result: dict[str, Any]) -> None:
    """The comparison on the console: one line per run, the summary and the decision agreement."""
    for r in result["rows"]:
        t, p = r["tokens_per_s"], r["predicted_acceptance"]["tokens_per_s"]
        print(f"{r['name']:<28} tok/s meas {fmt(t['measured'], 1, 1):>8} sim {fmt(t['simulated'], 1, 1):>8} err "
              f"{pct(t['error']):>7}   iter err {pct(r['iteration_time_s']['error']):>7}   predicted acceptance: "
              f"sim {fmt(p['simulated'], 1, 1):>8} err {pct(p['error']):>7}")
    for view, key in (("replayed acceptance", "decision_agreement"),
                      ("predicted acceptance", "decision_agreement_predicted_acceptance")):
        print("\n".join(agreement_lines(result[key], view)))
