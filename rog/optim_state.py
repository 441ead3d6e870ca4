"""The state of a :class:`rog.optim.ROGOptimizer`, in ``torch.optim``'s format, and its restore.

``state_dict()`` is what ``torch.optim.SGD`` writes (``state``: per parameter index, ``param_groups``: the
groups' hyper-parameters with the parameters as indices) plus what a ROG worker holds beside it::

    state[i] = {"momentum_buffer": ..., "error_feedback": ..., "step": tensor(iteration)}   # row tensors only
    rog = {"iteration", "push_seq", "pull_seq", "pushed_iteration", "row_push_iter", "schedulers",
           "local_update"}

``error_feedback`` is the worker's accumulator (updates computed but not yet delivered to the PS); the
push and pull counts let a worker that restarted and rejoined check that the PS committed nothing of it
after this state was taken (its accumulator would then be applied twice).  Tensors are copies on the
parameters' device (CPU or CUDA); ``torch.save`` writes the whole dict.
"""

from __future__ import annotations

import numpy as np
import torch

STATE_KEYS = ("momentum_buffer", "error_feedback", "step")


def _as_tensor(buf, device) -> torch.Tensor:
    return buf.detach().clone() if isinstance(buf, torch.Tensor) else torch.from_numpy(np.array(buf)).to(device)


def optimizer_state(opt) -> dict:
    """``opt``'s state dict (see the module docstring)."""
    e, part = opt.engine, opt.partition
    off = part.tensor_offset.tolist()
    momentum = getattr(e.local, "momentum_buf", None)
    state = {}
    for t, (i, p) in enumerate(zip(opt._row_index, opt.row_params)):
        sl = slice(off[t], off[t + 1])
        st = {"error_feedback": _as_tensor(e.acc[sl], p.device).view(p.shape),
              "step": torch.tensor(float(e.iteration))}
        if momentum is not None:
            st["momentum_buffer"] = _as_tensor(momentum[sl], p.device).view(p.shape)
        state[i] = st
    if hasattr(e.local, "inner_state"):  # a torch optimizer as the local update: its own per-parameter state
        for t, inner in e.local.inner_state().items():
            state[opt._row_index[t]].update(inner)
    groups, n = [], 0
    for g in opt.param_groups:
        entry = {k: v for k, v in g.items() if k != "params"}
        entry["params"] = list(range(n, n + len(g["params"])))
        n += len(g["params"])
        groups.append(entry)
    rog = dict(iteration=int(e.iteration), push_seq=int(e.push_seq), pull_seq=int(e.pull_seq),
               pushed_iteration=int(e.pushed_iteration), row_push_iter=e.row_push_iter.tolist(),
               schedulers=[s.state_dict() for s in opt.schedulers], local_update=type(e.local).__name__)
    return {"state": state, "param_groups": groups, "rog": rog}


def _check_shape(sd_groups, opt) -> None:
    if len(sd_groups) != len(opt.param_groups):
        raise ValueError(f"load_state_dict: the state has {len(sd_groups)} parameter group(s), this optimizer "
                         f"{len(opt.param_groups)}")
    for i, (s, g) in enumerate(zip(sd_groups, opt.param_groups)):
        if len(s["params"]) != len(g["params"]):
            raise ValueError(f"load_state_dict: param_groups[{i}] has {len(s['params'])} parameters in the state, "
                             f"{len(g['params'])} here")


def load_optimizer_state(opt, sd: dict) -> None:
    """Restore ``sd`` (from :func:`optimizer_state`) into ``opt`` (see ``ROGOptimizer.load_state_dict``)."""
    for key in ("state", "param_groups", "rog"):
        if key not in sd:
            raise ValueError(f"load_state_dict: the state has no {key!r} (not a ROGOptimizer state_dict)")
    _check_shape(sd["param_groups"], opt)
    e, rog = opt.engine, sd["rog"]
    if rog.get("local_update") != type(e.local).__name__:
        raise ValueError(f"load_state_dict: the state is of local update {rog.get('local_update')!r}, this optimizer "
                         f"runs {type(e.local).__name__!r}")
    it = int(rog["iteration"])
    fresh = e.push_seq == 0 and e.pull_seq == 0 and e.iteration == 0  # joined, nothing exchanged yet
    if not fresh and (e.iteration != it or e.push_seq != int(rog["push_seq"])):
        raise ValueError(
            f"load_state_dict: the state is of iteration {it} after {rog['push_seq']} pushes, but the parameter "
            f"server has this worker at iteration {e.iteration} after {e.push_seq}: it committed pushes made after "
            f"this state was saved, so restoring its error feedback would apply them twice; restore the state "
            f"saved last (after every step)")
    off = opt.partition.tensor_offset.tolist()
    index_of = {}  # saved parameter index -> row tensor
    n = 0
    for s, g in zip(sd["param_groups"], opt.param_groups):
        for j, saved in enumerate(s["params"]):
            index_of[saved] = n + j
        n += len(g["params"])
    row_of = {i: t for t, i in enumerate(opt._row_index)}
    momentum = getattr(e.local, "momentum_buf", None)
    inner = {}
    for saved, st in sd["state"].items():
        t = row_of.get(index_of.get(saved, -1))
        if t is None:
            raise ValueError(f"load_state_dict: state for parameter {saved}, which is frozen or absent here")
        sl = slice(off[t], off[t + 1])
        for key, buf in (("error_feedback", e.acc), ("momentum_buffer", momentum)):
            if key in st and buf is not None:
                _copy_into(buf, sl, st[key], f"state[{saved}][{key!r}]")
        extra = {k: v for k, v in st.items() if k not in STATE_KEYS}
        if extra:
            inner[t] = extra
    if inner and hasattr(e.local, "load_inner_state"):
        e.local.load_inner_state(inner)
    for s, g in zip(sd["param_groups"], opt.param_groups):
        g.update({k: v for k, v in s.items() if k != "params"})
    e.iteration, e.pushed_iteration = it, max(int(rog["pushed_iteration"]), e.pushed_iteration)
    e.row_push_iter[:] = np.asarray(rog["row_push_iter"], dtype=np.int64)
    saved_s = rog.get("schedulers", [])
    if len(saved_s) != len(opt.schedulers):
        raise ValueError(f"load_state_dict: the state carries {len(saved_s)} scheduler(s), {len(opt.schedulers)} are "
                         f"attached here (opt.attach(scheduler) before loading)")
    for sched, ss in zip(opt.schedulers, saved_s):
        sched.load_state_dict(ss)
    opt.sync_groups()


def _copy_into(buf, sl: slice, value, what: str) -> None:
    value = value.detach().reshape(-1)
    if value.numel() != sl.stop - sl.start:
        raise ValueError(f"load_state_dict: {what} has {value.numel()} elements, the parameter {sl.stop - sl.start}")
    if isinstance(buf, torch.Tensor):
        buf[sl].copy_(value.to(buf.device, torch.float32))
    else:
        buf[sl] = value.to("cpu", torch.float32).numpy()
