"""analysis/splits_doc.py: the SPLITS table's rows come from the simulator with the shipped profile."""

from __future__ import annotations

import pytest

from analysis import splits_doc


def test_a_splits_row_is_the_simulators_and_the_table_shows_it():
    row = splits_doc.simulate_row(4, 3, 1, "async_tree", "profiles/h200.json")
    assert (row["gpus"], row["target_gpus"], row["draft_gpus"], row["mode"]) == (4, 3, 1, "async_tree")
    assert row["tokens_per_s"] > 0 and row["verify_time_s"] <= row["iteration_time_s"]
    assert "parallel=3x1" in row["overrides"]
    line = splits_doc.table([row]).splitlines()[-1]
    assert line.startswith(f"| 4 | 3:1 | async_tree | {row['tokens_per_s']:.1f} | ") and "not run" in line


def test_splits_doc_names_a_missing_profile(tmp_path):
    with pytest.raises(SystemExit, match=r"--profile: .*nope\.json is not a file"):
        splits_doc.main(["--profile", str(tmp_path / "nope.json")])
