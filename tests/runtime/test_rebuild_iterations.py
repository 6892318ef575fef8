"""runtime.rebuild_iterations refuses what it cannot re-derive, naming the run dir (the happy path and a changed
cell: tests/runtime/test_generate.py, on generate.py's own run dir)."""

from __future__ import annotations

import json

import pytest

from runtime.rebuild_iterations import RebuildError, main, rebuild


def test_a_folder_without_the_run_files_is_named(tmp_path):
    with pytest.raises(RebuildError, match=r"empty: config.json is missing \(a runtime run dir has config.json, "
                                           r"traces.jsonl and iterations.csv\)"):
        rebuild(tmp_path / "empty")


def test_a_simulated_run_is_refused(tmp_path):
    run = tmp_path / "sim"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"config": {"parallel": {}}, "meta": {"source": "sim"}}))
    (run / "traces.jsonl").write_text("")
    (run / "iterations.csv").write_text("request,iteration\n")
    with pytest.raises(RebuildError, match=r"sim: a 'sim' run; only runtime run dirs derive their rows"):
        main([str(run)])
    assert (run / "iterations.csv").read_text() == "request,iteration\n"  # left as it was
