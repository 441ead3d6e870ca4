"""MTA: Table I, the defining inequality, the artifact's extra share and mandatory row counts."""

import math

import numpy as np
import pytest

from rog.policies.mta import ARTIFACT_EXTRA_SHARE, extra_share, mandatory_rows, mandatory_share, mta_fraction

TABLE_I = {2: 0.5, 3: 0.38, 4: 0.32, 5: 0.28, 6: 0.25, 7: 0.22, 8: 0.20}


@pytest.mark.parametrize("s,expected", sorted(TABLE_I.items()))
def test_table_i_rounded(s, expected):
    assert round(mta_fraction(s), 2) == pytest.approx(expected)


@pytest.mark.parametrize("s", [2, 3, 4, 5, 6, 7, 8, 9, 10, 40, 100, 1000])
def test_defining_inequality_holds_at_p_and_fails_just_below(s):
    p = mta_fraction(s)
    assert 0 < p <= 1
    assert (1 - p) ** (s - 1) <= p
    below = p - 1e-9
    assert (1 - below) ** (s - 1) > below


def test_closed_forms():
    # S=2: 1-P = P -> 1/2.  S=3: (1-P)^2 = P -> P^2 - 3P + 1 = 0 -> (3 - sqrt 5)/2.
    assert mta_fraction(2) == 0.5
    assert mta_fraction(3) == pytest.approx((3 - math.sqrt(5)) / 2, abs=1e-12)


@pytest.mark.parametrize("s", range(2, 11))
def test_matches_polynomial_roots(s):
    # independent reference: the real root in (0, 1) of (1-P)^(s-1) - P, via numpy.roots
    poly = np.polysub(np.poly1d([-1.0, 1.0]) ** (s - 1), np.poly1d([1.0, 0.0]))
    roots = [r.real for r in np.roots(poly.coeffs) if abs(r.imag) < 1e-9 and 0 < r.real < 1]
    assert len(roots) == 1
    assert mta_fraction(s) == pytest.approx(roots[0], abs=1e-10)


def test_degenerate_thresholds_send_everything():
    assert mta_fraction(0) == 1.0  # BSP
    assert mta_fraction(1) == 1.0
    assert mandatory_rows(17, 0) == 17
    assert mandatory_rows(17, 1) == 17


def test_large_threshold_has_no_upper_limit():
    p = mta_fraction(10**6)
    assert 0 < p < 1e-4
    assert (1 - p) ** (10**6 - 1) <= p


def test_monotone_decreasing_in_threshold():
    values = [mta_fraction(s) for s in range(1, 60)]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_extra_share_is_the_originals_table():
    # the points docs/design.md#artifact-choices lists
    for s, v in {4: 0.0, 5: 0.03, 10: 0.075, 20: 0.11, 30: 0.113, 40: 0.115}.items():
        assert extra_share(s) == pytest.approx(v)
    assert sorted(ARTIFACT_EXTRA_SHARE) == list(range(41))  # one value per threshold the original ran
    assert extra_share(0) == 0.0
    assert extra_share(3) == 0.0
    # between those points: the original's own values, not a line (7 and 8 are not monotone)
    assert extra_share(7) == pytest.approx(0.06)
    assert extra_share(8) == pytest.approx(0.05)
    assert extra_share(15) == pytest.approx(0.102)
    assert extra_share(25) == pytest.approx(0.112)
    assert extra_share(35) == pytest.approx(0.114)
    # beyond the original's 40: its value at 40
    assert extra_share(41) == pytest.approx(0.115)
    assert extra_share(1000) == pytest.approx(0.115)


def test_mandatory_rows_hand_computed():
    # S=2: 0.5 of 4 rows is exactly 2 (no float creep to 3)
    assert mandatory_rows(4, 2) == 2
    assert mandatory_rows(5, 2) == 3
    # S=4, ConvMLP-M: ceil(0.317672196... * 33307) = ceil(10580.71) = 10581 (artifact: 10,657 with 0.32)
    assert mandatory_rows(33307, 4) == 10581
    assert mandatory_rows(33307, 4, extra="none") == 10581
    # S=5: MTA 0.275508..., extra 0.03 -> 0.305508 * 100 = 30.55 -> 31 ; without extra 27.55 -> 28
    assert mandatory_rows(100, 5) == 31
    assert mandatory_rows(100, 5, extra="none") == 28
    # a numeric extra share
    assert mandatory_rows(100, 5, extra=0.5) == 78  # 0.7755 * 100 -> 78
    assert mandatory_rows(100, 2, extra=0.9) == 100  # capped
    assert mandatory_rows(0, 4) == 0
    assert mandatory_share(40) == pytest.approx(mta_fraction(40) + 0.115)


@pytest.mark.parametrize("bad", [-1, 1.5, "4", True])
def test_bad_threshold_is_value_error(bad):
    with pytest.raises(ValueError, match="threshold"):
        mta_fraction(bad)


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="n_rows"):
        mandatory_rows(-3, 4)
    with pytest.raises(ValueError, match="extra"):
        mandatory_rows(10, 4, extra="paper")
    with pytest.raises(ValueError, match="extra"):
        mandatory_rows(10, 4, extra=1.5)
