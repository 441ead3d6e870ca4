"""Random per-layer plan costs for the timeline property tests (shared by the stream tests)."""

from __future__ import annotations

import random

from rog.inference.loss import MultiCosts


def random_multi_costs(rng: random.Random) -> MultiCosts:
    """1-4 segments of random bytes (none down before the first) and seconds; a merge message of at least a
    byte; output bytes only when the merge is on the server."""
    k = rng.randint(1, 4)
    segs = tuple((rng.choice([0, rng.randint(1, 500_000)]), 0 if i == 0 else rng.choice([0, rng.randint(1, 500_000)]),
                  rng.uniform(0, 0.3), rng.uniform(0, 0.3)) for i in range(k))
    merge = rng.choice(["robot", "server"])
    return MultiCosts(rng.uniform(0, 0.2), segs, merge, rng.randint(1, 800_000),
                      rng.randint(0, 50_000) if merge == "server" else 0, rng.uniform(0, 0.1))
