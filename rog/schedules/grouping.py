"""DynaComm's layers from a model's execution order: one forward pass with hooks on every leaf module.

* a leaf module with parameters starts a new layer, except a normalisation module (BatchNorm,
  LayerNorm, GroupNorm), which is fused with the layer before it (its convolution);
* parameter-free modules (activations, pooling, flatten) are folded into the next layer (trailing
  ones into the last layer);
* parameters that no leaf module owns (embeddings held by a container) belong to the first layer,
  so the forward pass waits for them before anything runs;
* a module with the attribute ``parallel_branches = True`` (an Inception block, whose branches run side
  by side) is one layer: every leaf under it, with or without parameters, joins the layer its first
  leaf with parameters starts.  DynaComm merges parallel branches "at the same depth"; PyTorch runs the
  branches one after another, so per-depth layers would interleave in time and their compute could not
  be timed apart: one layer per block is the contiguous reading (docs/dynacomm.md).

Each layer lists its parameter indices (positions in ``list(model.parameters())``, the order of the
optimizer's row partition) and its *gate module*: its first module with parameters, before which
the layer's pull segment must have arrived.
"""

from __future__ import annotations

from dataclasses import dataclass

NORM_TYPES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LayerNorm", "GroupNorm")


@dataclass
class Layer:
    """One DynaComm layer: module names in execution order, parameter indices, the gate module's name."""

    modules: list[str]
    params: list[int]
    gate: str


def _is_leaf(m) -> bool:
    return next(iter(m.children()), None) is None


def group_layers(model, sample_input) -> list[Layer]:
    """The model's layers, from one forward pass of ``sample_input`` (no gradients; buffers and the random state restored)."""
    import torch

    names = {m: n for n, m in model.named_modules()}
    order: list = []
    seen: set = set()

    def record(mod, _inp):
        if mod not in seen:
            seen.add(mod)
            order.append(mod)

    handles = [m.register_forward_pre_hook(record) for m in model.modules() if _is_leaf(m)]
    rng = torch.get_rng_state()
    buffers = [(b, b.detach().clone()) for b in model.buffers()]  # BatchNorm statistics, counters
    try:
        with torch.no_grad():
            model(sample_input)
    finally:
        for h in handles:
            h.remove()
        torch.set_rng_state(rng)  # the probe pass leaves the random stream (dropout, drop-path) untouched
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
    index = {id(p): i for i, p in enumerate(model.parameters())}
    block_of = _branch_blocks(model)
    layers: list[Layer] = []
    pending: list[str] = []
    owned: set[int] = set()
    last_block = None  # the parallel-branches block the last layer holds, if any
    for mod in order:
        own = [index[id(p)] for p in mod.parameters(recurse=False) if id(p) in index and index[id(p)] not in owned]
        blk = block_of.get(mod)
        if blk is not None and blk == last_block:
            owned.update(own)
            layers[-1].modules.append(names[mod])
            layers[-1].params.extend(own)
            continue
        if not own:
            pending.append(names[mod])
            continue
        owned.update(own)
        if type(mod).__name__ in NORM_TYPES and layers and not pending and blk is None:
            layers[-1].modules.append(names[mod])
            layers[-1].params.extend(own)
            continue
        layers.append(Layer(pending + [names[mod]], own, names[mod]))
        pending = []
        last_block = blk
    if not layers:
        raise ValueError("the model ran no module with parameters: nothing to schedule")
    layers[-1].modules.extend(pending)
    rest = [i for i in range(len(index)) if i not in owned]
    layers[0].params = sorted(set(layers[0].params) | set(rest))
    for layer in layers:
        layer.params.sort()
    return layers


def _branch_blocks(model) -> dict:
    """Each module under an outermost ``parallel_branches`` module -> that module's name."""
    out: dict = {}
    for name, m in model.named_modules():
        if getattr(m, "parallel_branches", False) and m not in out:
            for sub in m.modules():
                out.setdefault(sub, name)
    return out
