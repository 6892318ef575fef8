"""The fp8 tile tables in kernels/ are the picks of the measured sweep they cite (data/measured/fp8_tiles_*.json)."""

from __future__ import annotations

import importlib
import json

from conf.rundir import MEASURED_DIR

SWEEP = MEASURED_DIR / "fp8_tiles_2026-12-02_f2eff415.json"


def _picks(rows: list[dict]) -> dict[tuple[int, int, int], dict[str, int]]:
    return {(r["n"], r["k"], r["m_bucket"]): r["config"] for r in rows}


def test_fp8_tables_are_the_sweeps_picks():
    skinny_linear = importlib.import_module("kernels.skinny_linear")  # the package re-exports a function of that name
    fused_mlp = importlib.import_module("kernels.fused_mlp")
    sweep = json.loads(SWEEP.read_text())
    assert sweep["benchmark"] == "fp8_tiles" and sweep["device"] == "NVIDIA H200"
    assert _picks(sweep["fp8_configs"]) == skinny_linear.FP8_CONFIGS
    assert _picks(sweep["swiglu_fp8_tiles"]) == fused_mlp.FP8_TILES
