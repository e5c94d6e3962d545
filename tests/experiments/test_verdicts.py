"""The verdict rules of every claim (experiments/harness/claims.py) on crafted values."""

from __future__ import annotations

import pytest

from experiments.harness.claims import claim_row, gain_verdict, noted_row, order_verdict, share_verdict, tolerance


def test_tolerance_band() -> None:
    assert tolerance(2.0) == 1.0            # the absolute floor
    assert tolerance(11.43) == pytest.approx(0.25 * 11.43)
    assert tolerance(-8.0) == 2.0


@pytest.mark.parametrize(("paper", "measured", "expected"), [
    (4.35, 4.35, "reproduced"), (4.35, 3.5, "reproduced"), (4.35, 30.0, "reproduced"),  # within the band, beyond it
    (11.43, 8.0, "partly"), (4.35, 0.5, "partly"),                                    # right sign, far short
    (4.35, 0.0, "not"), (4.35, -2.0, "not"), (4.35, None, "not"), (4.35, float("nan"), "not"),
    (-5.0, -6.0, "reproduced"), (-5.0, -1.0, "partly"), (-5.0, 3.0, "not"),          # a claimed loss
])
def test_at_least(paper: float, measured: float | None, expected: str) -> None:
    assert gain_verdict(paper, measured, "at_least") == expected


@pytest.mark.parametrize(("measured", "expected"), [
    (2.48, "reproduced"), (1.6, "reproduced"), (3.4, "reproduced"),
    (9.0, "partly"), (0.2, "partly"), (-0.5, "not"), (None, "not"),
])
def test_about(measured: float | None, expected: str) -> None:
    assert gain_verdict(2.48, measured, "about") == expected


@pytest.mark.parametrize(("measured", "expected"), [
    (-40.0, "reproduced"), (2.6, "reproduced"), (3.6, "reproduced"), (4.5, "partly"), (4.7, "not"), (None, "not"),
])
def test_at_most(measured: float | None, expected: str) -> None:
    assert gain_verdict(2.6, measured, "at_most") == expected


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        gain_verdict(1.0, 1.0, "roughly")


@pytest.mark.parametrize(("values", "descending", "expected"), [
    ([9.0, 7.0, 4.0, 1.0], True, "reproduced"),
    ([7.0, 9.0, 4.0, 1.0], True, "partly"),      # 5 of 6 pairs
    ([1.0, 4.0, 9.0, 7.0], True, "not"),         # 1 of 6
    ([0.5, 2.0, 4.0], False, "reproduced"),
    ([2.0, 0.5, 4.0], False, "partly"),          # 2 of 3
    ([4.0, 2.0, 0.5], False, "not"),
    ([1.0, 1.0, 1.0], False, "not"),             # ties are out of order
    ([0.5, None, 4.0], False, "not"),            # 1 of 3: a missing value is out of order
])
def test_order(values: list[float | None], descending: bool, expected: str) -> None:
    assert order_verdict(values, descending) == expected


def test_share_verdict_and_rows() -> None:
    assert [share_verdict(3, 3), share_verdict(2, 3), share_verdict(1, 3), share_verdict(0, 0)] == \
        ["reproduced", "partly", "not", "not"]
    row = claim_row("p", "c", 1.0, 1.23456, "partly", unit="%")
    assert list(row)[:5] == ["paper", "claim", "paper_value", "measured", "verdict"] and row["measured"] == 1.23
    assert claim_row("p", "c", 1.0, 1.23456, "partly", digits=None)["measured"] == 1.23456
    assert claim_row("p", "c", 1.0, float("nan"), "not")["measured"] is None
    assert "note" not in noted_row("p", "c", 1.0, 1.0, "reproduced") and noted_row("p", "c", 1, 1, "not", "n")["note"]
    with pytest.raises(ValueError, match="verdict"):
        claim_row("p", "c", 1.0, 1.0, "maybe")
