"""The acceptance family (policy/acceptance_family.py): its tables, its range errors, the closed form of a chain,
and the schema default as the SmolLM2 fit. The simulator against the family:
tests/simulator/test_acceptance_family.py."""

from __future__ import annotations

import math
import re

import pytest

from conf.schema import AcceptanceConfig, max_scale
from policy.acceptance import chain_accept_length, load_acceptance
from policy.acceptance_family import RANKS, chain_expected_tokens, check_family, family_table, fit_family
from tests.conftest import build


def _table(preset: str) -> list[list[float]]:
    return load_acceptance(build("simulate", [f"acceptance={preset}"]).acceptance, 8).table


@pytest.mark.parametrize("top1,decay,gain", [(0.4, 0.3, 0.0), (0.714, 2.2, 0.076), (0.9, 1.0, 0.076), (1.0, 0.5, 0.2),
                                             (0.0, 0.0, 0.0)])
def test_family_rows_follow_the_miss_survival(top1, decay, gain):
    table = family_table(top1, decay, gain)
    assert len(table[0]) == RANKS and table[0][0] == pytest.approx(top1)
    for d in (0, 3, 17):
        row, power = table[d], 1.0 + gain * d
        for r in (1, 2, 5, RANKS):  # the top r children leave ((1 - top1) r^-decay)^(1 + gain d) of the truth
            assert 1.0 - sum(row[:r]) == pytest.approx(((1.0 - top1) * r ** -decay) ** power, abs=1e-12)
        assert all(p >= 0.0 for p in row) and sum(row) <= 1.0 + 1e-12


def test_top1_sweeps_the_chain_from_one_token_to_gamma_plus_one():
    """Without depth gain the family's chain is the i.i.d. chain of acceptance top1 (Leviathan et al.'s closed form)."""
    for a in (0.0, 0.3, 0.7, 0.95, 1.0):
        assert chain_expected_tokens(family_table(a, 1.0, 0.0), 6) == pytest.approx(chain_accept_length(a, 6))
    assert chain_expected_tokens(family_table(0.0, 1.0, 0.5), 6) == 1.0
    assert chain_expected_tokens(family_table(1.0, 1.0, 0.5), 6) == 7.0


@pytest.mark.parametrize("field,value,bounds", [("top1", 1.2, "[0, 1]"), ("top1", -0.1, "[0, 1]"),
                                                ("decay", 11.0, "[0, 10]"), ("depth_gain", -0.5, "[0, 1]")])
def test_values_outside_the_family_are_one_line_errors_naming_the_field(field, value, bounds):
    msg = rf"^acceptance\.{field}: {re.escape(str(value))} is outside the acceptance family's range "
    with pytest.raises(ValueError, match=msg + re.escape(bounds) + "$"):
        AcceptanceConfig(kind="family", **{field: value}).validate()
    kwargs = {"top1": 0.5, "decay": 1.0, "depth_gain": 0.0, field: value}
    with pytest.raises(ValueError, match=rf"^acceptance\.{field}: "):
        check_family(**kwargs)
    with pytest.raises(ValueError, match=r"^acceptance\.file: kind=family builds its table"):
        AcceptanceConfig(kind="family", file="profiles/acceptance/smollm2.json").validate()


def test_a_scale_past_a_full_row_names_the_largest_valid_scale():
    """(The positional message itself: tests/policy/test_acceptance.py.) A strong family member's rows are near 1,
    so a scale past 1 / its largest row sum is refused there too, naming that scale."""
    assert max_scale(_table("smollm2")) == pytest.approx(1.0 / max(sum(r) for r in _table("smollm2")))
    default = AcceptanceConfig()
    table = family_table(0.9, default.decay, default.depth_gain)
    with pytest.raises(ValueError, match=r"acceptance\.scale: 1\.1 pushes a row of .* > 1; the largest valid scale "
                                         rf"for this table is {math.floor(1e4 * max_scale(table)) / 1e4:g}"):
        load_acceptance(AcceptanceConfig(kind="family", top1=0.9, scale=1.1), 8)


def test_the_schema_default_member_is_the_smollm2_fit():
    fit = fit_family(_table("smollm2"))
    default = AcceptanceConfig()
    assert (default.top1, default.decay, default.depth_gain) == tuple(round(x, 3) for x in fit)
