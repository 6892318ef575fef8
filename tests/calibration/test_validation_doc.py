"""calibration/validation_doc.py: the method text names where the profile's runtime block was fitted."""

from __future__ import annotations

from calibration.validation_doc import method_text


def test_held_out_item_names_the_fitted_configurations_and_their_folder():
    plain = method_text([])
    assert "5. **Held out by construction.**" in plain
    same = method_text(["ar", "chain_g4"], fit_folders=["runs/a"], runs="runs/a")
    assert "on the measured runs of\n   ar, chain_g4. Those configurations" in same
    assert "not this table's" not in same
    other = method_text(["ar"], fit_folders=["runs/old"], runs="runs/new")
    assert "ar (runs in `runs/old`, not this table's: every run below is unseen by the fit)." in other
    assert "5. **Held out by construction.**" not in other
