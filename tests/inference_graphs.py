"""The inference tests' captured models, built once per test process.

``capture(build_model(name), INPUT_SHAPE)`` costs about a second per model and seven test modules need the same
three models; the graphs are only read (plans, costs, forward passes).  ``build_model`` seeds torch's global
generator, so each call hands back the generator's state as the build left it: a test sees the same random
numbers as with a fresh build.
"""

from __future__ import annotations

import torch

from rog.inference.graph import capture
from rog.inference.models import INPUT_SHAPE, build_model

_CACHE: dict = {}


def captured(name: str):
    """The captured graph of model ``name`` (seed 0, eval mode); torch's generator as right after building it."""
    if name not in _CACHE:
        graph = capture(build_model(name), INPUT_SHAPE)
        _CACHE[name] = (graph, torch.get_rng_state())
    graph, rng = _CACHE[name]
    torch.set_rng_state(rng)
    return graph
