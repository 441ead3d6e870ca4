"""The profiling phases of a planned schedule and the per-layer median profile (hand-computed)."""

import numpy as np
import pytest

from rog.schedules.profiler import ComputeProfile, first_plan_iteration, phase


def test_phases():
    assert [phase(k) for k in range(1, 6)] == ["cold", "profile", "profile", "planned", "planned"]
    assert first_plan_iteration() == 3
    with pytest.raises(ValueError):
        phase(0)


def test_median_per_layer_and_clear():
    p = ComputeProfile()
    p.add([1.0, 2.0, 10.0], [0.5, 0.1, 0.0])
    p.add([3.0, 2.0, 0.0], [0.3, 0.2, 0.4])
    p.add([2.0, 5.0, 1.0], [9.0, 0.3, 0.2])  # one loaded sample does not move the medians far
    fc, bc = p.median()
    np.testing.assert_array_equal(fc, [2.0, 2.0, 1.0])
    np.testing.assert_array_equal(bc, [0.5, 0.2, 0.2])
    np.testing.assert_array_equal(p.last()[0], [2.0, 5.0, 1.0])
    p.clear()
    assert len(p) == 0
    with pytest.raises(ValueError, match="no warm iteration"):
        p.median()


def test_window_keeps_the_latest_samples_and_copies():
    p = ComputeProfile(window=2)
    a = np.array([1.0, 1.0])
    p.add(a, a)
    a[:] = 100.0  # the caller's array changes afterwards
    p.add([3.0, 3.0], [3.0, 3.0])
    p.add([5.0, 5.0], [5.0, 5.0])
    np.testing.assert_array_equal(p.median()[0], [4.0, 4.0])
    with pytest.raises(ValueError, match="one length"):
        p.add([1.0], [1.0, 2.0])
