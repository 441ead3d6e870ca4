"""iBatch's Algs. 1 and 2 (rog.schedules.ibatch) on profiles worked out by hand, and invariants on random ones."""

import numpy as np
import pytest

from rog.schedules import ibatch
from rog.schedules.planner import Profile, forward_dp, forward_time


def _profile(pt, fc, dt):
    n = len(pt)
    return Profile(pt=np.array(pt, float), fc=np.array(fc, float), bc=np.ones(n), gt=np.ones(n), dt_s=dt)


# Profile A: pt = [1, 1, 4, 1, 1], fc = [1, 2, 1, 4, 1], dt = 0.5 (L = 5)
# PT prefix [0, 1, 2, 6, 7, 8], FC prefix [0, 1, 3, 4, 8, 9].
#
# Alg. 1, pairs (D1, D2) with 0.5 + PT(D1+1..D2) >= FC(1..D1):
#   D1=1 (FC 1): D2=2: 1.5 >= 1 yes, and every larger D2
#   D1=2 (FC 3): D2=3: 4.5 >= 3 yes (slack 1.5); D2=4: 5.5 (2.5); D2=5: 6.5 (3.5)
#   D1=3 (FC 4): D2=4: 1.5 no; D2=5: 2.5 no
#   D1=4 (FC 8): D2=5: 1.5 no
# largest FC(1..D1) = 3 at D1 = 2; line 4's key (0.5 + PT(1..2) = 2.5) ties over D2 = 3, 4, 5; the
# smallest slack gives D2 = 3.  n = 2, m = 3: need FC(3..3) = 1; x = 4: 0.5 + 1 = 1.5 (slack 0.5),
# x = 5: 2.5 (slack 1.5) -> j = 4.  n = 3, m = 4: need FC(4..4) = 4; x = 5: 1.5 < 4, no option -> L.
# D = [0, 2, 3, 4, 5].
#
# Alg. 2, pairs (b = D[N-2], a = D[N-1]) with 0.5 + PT(a+1..5) >= FC(b+1..a):
#   0.5 + PT(a+1..5) = 7.5, 6.5, 2.5, 1.5 for a = 1..4
#   a=1: b=0 FC 1 yes.  a=2: b=0 FC 3 yes, b=1 FC 2 yes.  a=3: b=0 4 no, b=1 3 no, b=2 1 yes.
#   a=4: b=0..3: FC 8, 7, 5, 4 all > 1.5 no.
# largest FC = 3 at (b, a) = (0, 2): n = 0, the pass ends.  D = [0, 2, 5].
#
# Forward times (segment j arrives at j*dt + PT(its end), compute starts at max(previous end, arrival)):
#   Alg. 1 [1..2][3][4][5]: 0.5+2 = 2.5 +3 = 5.5; max(5.5, 1+6) = 7 +1 = 8; max(8, 1.5+7) = 8.5 +4 = 12.5;
#                          max(12.5, 2+8) +1 = 13.5
#   Alg. 2 [1..2][3..5]:   2.5 + 3 = 5.5; max(5.5, 1+8) = 9 + 6 = 15
# iBatch keeps Alg. 1's (13.5 < 15).
A = ([1, 1, 4, 1, 1], [1, 2, 1, 4, 1], 0.5)

# Profile B: pt = [1, 1, 1, 1, 1, 3], fc = [1, 1, 2, 2, 2, 1], dt = 0.5 (L = 6)
# PT prefix [0, 1, 2, 3, 4, 5, 8], FC prefix [0, 1, 2, 4, 6, 8, 9].
#
# Alg. 1: D1=1 (FC 1): D2=2 1.5 yes.  D1=2 (FC 2): D2=3 1.5 no, D2=4 2.5 yes, 5, 6 yes.
#   D1=3 (FC 4): D2=4 1.5 no, D2=5 2.5 no, D2=6 0.5+5 = 5.5 yes.  D1=4 (FC 6): 1.5, 4.5 no.
#   D1=5 (FC 8): 3.5 no.  Largest FC = 4 at (3, 6): D = [0, 3, 6].
#
# Alg. 2: 0.5 + PT(a+1..6) = 7.5, 6.5, 5.5, 4.5, 3.5 for a = 1..5
#   a=5: b=4 FC 2 yes, b=3 FC 4 no.  a=4: b=3 2, b=2 4 yes, b=1 5 no.  a=3: b=2 2, b=1 3, b=0 4 yes.
#   a=2: FC 1, 2.  a=1: FC 1.
# largest FC = 4 at (2, 4) and (0, 3); line 4: the smallest PT(a+1..6): 4 (a=4) < 5 (a=3) -> (2, 4).
# n = 2, m = 4: pull 0.5 + PT(3..4) = 2.5; x = 1: FC(2..2) = 1 (slack 1.5), x = 0: FC(1..2) = 2
# (slack 0.5) -> j = 0.  D = [0, 2, 4, 6].
#
# Forward times: Alg. 1 [1..3][4..6]: 0.5+3 = 3.5 +4 = 7.5; max(7.5, 1+8) = 9 +5 = 14
#                Alg. 2 [1..2][3..4][5..6]: 0.5+2 = 2.5 +2 = 4.5; max(4.5, 1+4) = 5 +4 = 9;
#                                           max(9, 1.5+8) = 9.5 +3 = 12.5
# iBatch keeps Alg. 2's (12.5 < 14).
B = ([1, 1, 1, 1, 1, 3], [1, 1, 2, 2, 2, 1], 0.5)


def test_alg1_by_hand():
    assert ibatch.forward_greedy(*A) == [0, 2, 3, 4, 5]
    assert ibatch.forward_greedy(*B) == [0, 3, 6]


def test_alg2_by_hand():
    assert ibatch.backward_greedy(*A) == [0, 2, 5]
    assert ibatch.backward_greedy(*B) == [0, 2, 4, 6]


def test_ibatch_keeps_the_faster_candidate_by_hand():
    pa, pb = _profile(*A), _profile(*B)
    assert forward_time(ibatch.segments_of([0, 2, 3, 4, 5]), pa) == pytest.approx(13.5)
    assert forward_time(ibatch.segments_of([0, 2, 5]), pa) == pytest.approx(15.0)
    assert ibatch.forward_segments(pa) == [(0, 1), (2, 2), (3, 3), (4, 4)]
    assert forward_time(ibatch.segments_of([0, 3, 6]), pb) == pytest.approx(14.0)
    assert forward_time(ibatch.segments_of([0, 2, 4, 6]), pb) == pytest.approx(12.5)
    plan = ibatch.plan(pb)
    assert plan.fwd_segments == ((0, 1), (2, 3), (4, 5))
    assert plan.predicted_fwd_s == pytest.approx(12.5)
    assert plan.bwd_segments == tuple((i, i) for i in range(5, -1, -1))  # LBL backward


def test_no_qualifying_pair_is_one_segment():
    # pt = [1, 1], fc = [5, 5], dt = 0: Alg. 1's only pair (1, 2): PT(2) = 1 < FC(1) = 5; Alg. 2's only
    # pair (0, 1): PT(2) = 1 < FC(1) = 5
    assert ibatch.forward_greedy([1, 1], [5, 5], 0.0) == [0, 2]
    assert ibatch.backward_greedy([1, 1], [5, 5], 0.0) == [0, 2]
    assert ibatch.forward_greedy([1], [1], 0.0) == [0, 1]


def test_alg2_is_not_alg1_on_reversed_layers():
    # Profile B reversed: pt = [3, 1, 1, 1, 1, 1], fc = [1, 2, 2, 2, 1, 1]; Alg. 1 on it, mirrored back,
    # is the old "mirror pass"; Alg. 2 on B gave [0, 2, 4, 6]
    pt, fc, dt = B
    rev = ibatch.forward_greedy(pt[::-1], fc[::-1], dt)
    mirrored = sorted(6 - d for d in rev)
    assert mirrored != ibatch.backward_greedy(pt, fc, dt)


def test_random_profiles_invariants():
    rng = np.random.default_rng(7)
    for _ in range(200):
        L = int(rng.integers(1, 10))
        pt, fc, dt = rng.uniform(0, 2, L), rng.uniform(0, 2, L), float(rng.uniform(0, 1))
        for g in (ibatch.forward_greedy, ibatch.backward_greedy):
            D = g(pt, fc, dt)
            assert D[0] == 0 and D[-1] == L and all(a < b for a, b in zip(D, D[1:]))
        p = _profile(pt, fc, dt)
        t_opt, _ = forward_dp(p)
        assert forward_time(ibatch.forward_segments(p), p) >= t_opt - 1e-9
