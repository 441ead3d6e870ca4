"""A parameter server for any model in one call, and the ``rog-server`` command.

::

    import rog
    rog.serve(model, workers=2, port=5555, policy="ROG", threshold=4, secret=shared)   # blocks until done

    rog-server --model examples/own_loop.py:make_model --workers 2 --port 5555       # ROG_SECRET from the env

``model_or_layout`` is what the workers' :class:`~rog.optim.ROGOptimizer` synchronises: a ``torch.nn.Module``
(its trainable parameters in registration order), the same parameters or param groups the workers pass to
their optimizer (:func:`rog.optim.row_layout`), or a :class:`~rog.rows.RowPartition`.  The shared secret is
checked before anything starts (``secret`` or the ``ROG_SECRET`` environment variable, at least 16 bytes).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .chunks import ARTIFACT_CHUNK_SHARE, chunk_bytes_for_share
from .codecs.codec_registry import make_codec
from .errors import ConfigError
from .policies import make_policy
from .rows import RowPartition
from .runtime import ParameterServer
from .runtime.worker import RuntimeFailure
from .transport import Listener, TransportConfig, load_secret
from .transport.config import MIN_SECRET_BYTES

DEFAULT_PORT = 5555


def check_secret(secret: bytes | str | None) -> bytes:
    """The shared secret as bytes: ``secret``, or the ``ROG_SECRET`` environment variable; ValueError naming the
    fix when it is missing or shorter than 16 bytes."""
    if secret is None:
        return load_secret()
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if len(raw.strip()) < MIN_SECRET_BYTES:
        raise ValueError(f"secret holds {len(raw.strip())} bytes; the shared secret needs at least {MIN_SECRET_BYTES} "
                         f"(e.g. secrets.token_hex(32), the same on every worker)")
    return raw.strip()


def layout_of(model_or_layout) -> RowPartition:
    """The row layout to serve (see the module docstring)."""
    if isinstance(model_or_layout, RowPartition):
        return model_or_layout
    from .optim import row_layout

    return row_layout(model_or_layout)


@dataclass
class Served:
    """A running parameter server: ``ps`` (:class:`~rog.runtime.ParameterServer`), its serving thread and address."""

    ps: ParameterServer
    thread: threading.Thread
    listener: Listener
    address: tuple

    def wait(self, timeout_s: float | None = None) -> ParameterServer:
        """Wait until every worker has finished (flushed and left, or is gone); raise if the server failed."""
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise TimeoutError(f"the parameter server at {self.address} is still serving after {timeout_s} s")
        self.listener.close()
        failed = [(r, e) for r, e in self.ps.errors if r not in self.ps.finished_workers]
        if failed and not self.ps.finished_workers:
            raise RuntimeFailure("parameter server: " + "; ".join(f"worker {r}: {e}" for r, e in failed))
        return self.ps

    def close(self) -> None:
        """Stop serving now."""
        self.ps.stop()
        self.listener.close()


def serve(model_or_layout, *, workers: int, port: int = DEFAULT_PORT, host: str = "0.0.0.0", policy: str = "ROG",
          threshold: int | None = None, compression: str = "sign", secret: bytes | str | None = None,
          wait: bool = True, initial=None, policy_options: Mapping | None = None,
          codec_options: Mapping | None = None, join_timeout_s: float = 600.0, wait_timeout_s: float = 600.0,
          evict_after_s: float = 60.0):
    """Serve ``model_or_layout`` to ``workers`` ROGOptimizer workers on ``host:port`` (``port=0``: any free one).

    ``policy``/``threshold``/``compression`` must match the workers' (``threshold=None``: the policy's default,
    ROG 4); a lost worker keeps its slot for ``evict_after_s`` (it may rejoin).  ``initial``: the team's
    starting parameters (:func:`initial_params`: a ``.npy`` flat float32 file, or a ``.pt`` state_dict of the
    served model); None: the first worker's.  With ``wait`` (default) blocks
    until the run ends and returns the :class:`~rog.runtime.ParameterServer`; else returns a :class:`Served`."""
    key = check_secret(secret)  # before anything starts
    part = layout_of(model_or_layout)
    codec = make_codec(compression, **(codec_options or {}))
    sync = make_policy(policy, threshold, **(policy_options or {}))
    chunk_bytes = chunk_bytes_for_share(codec.row_wire_bytes(part), ARTIFACT_CHUNK_SHARE)  # the workers' default
    start = None if initial is None else initial_params(initial, model_or_layout, part)
    ps = ParameterServer(part, workers, sync, codec, chunk_bytes=chunk_bytes, join_timeout_s=join_timeout_s,
                         wait_timeout_s=wait_timeout_s, evict_after_s=evict_after_s, initial_params=start)
    listener = Listener(host, int(port), config=TransportConfig(secret=key), worker_ids=set(range(int(workers))))
    served = Served(ps, ps.start(listener), listener, listener.address)
    return served.wait() if wait else served


def initial_params(path, model, part: RowPartition):
    """The flat float32 starting parameters in ``path``: a ``.npy`` array of the layout's size, or a ``.pt``/``.pth``
    ``state_dict`` of ``model`` (a ``torch.nn.Module``; loaded with ``weights_only``, no code runs)."""
    import numpy as np

    path = Path(path)
    if path.suffix == ".npy":
        flat = np.load(path, allow_pickle=False)
    elif path.suffix in (".pt", ".pth"):
        import torch

        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"initial {path}: a state_dict needs the model itself (rog.serve(model, ...))")
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        flat = np.concatenate([p.detach().reshape(-1).numpy() for p in model.parameters() if p.requires_grad])
    else:
        raise ValueError(f"initial {path}: give a .npy (flat float32) or a .pt/.pth state_dict")
    if flat.size != part.n_elements:
        raise ValueError(f"initial {path}: {flat.size} values, the layout has {part.n_elements}")
    return flat.astype(np.float32)


def load_factory(spec: str):
    """The callable ``spec`` names: ``package.module:name``, or ``path/to/file.py:name`` for a file under the current
    directory (imported as the module ``path.to.file``, the current directory first on the path as with
    ``python -m``); ConfigError otherwise."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"--model {spec!r}: give FILE.py:FUNCTION or MODULE:FUNCTION (a function returning the model)")
    if where.endswith(".py"):
        path = Path(where)
        if path.is_absolute() or ".." in path.parts or not path.is_file():
            raise ConfigError(f"--model {spec!r}: no file {where} under the current directory (run rog-server from "
                              f"the folder that holds it, or give MODULE:FUNCTION)")
        where = ".".join(path.with_suffix("").parts)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(where)
    except ImportError as e:
        raise ConfigError(f"--model {spec!r}: cannot import {where}: {e}") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ConfigError(f"--model {spec!r}: {where} has no function {name!r}")
    return factory


def main(argv=None) -> int:
    """``rog-server``: serve a model given as FILE.py:FUNCTION to N workers."""
    p = argparse.ArgumentParser(prog="rog-server", description="A ROG parameter server for your own model "
                                "(the shared secret comes from ROG_SECRET or --secret-file).")
    p.add_argument("--model", required=True, help="FILE.py:FUNCTION or MODULE:FUNCTION returning the torch model "
                   "the workers train (its trainable parameters are the rows)")
    p.add_argument("--workers", type=int, required=True, help="number of workers (ids 0..N-1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--policy", default="ROG", help="ROG, BSP, SSP or FLOWN (the workers' policy)")
    p.add_argument("--threshold", type=int, default=None, help="staleness threshold (default: the policy's, ROG 4)")
    p.add_argument("--compression", default="sign", help="the workers' codec: sign (1-bit, default) or none")
    p.add_argument("--secret-file", type=Path, default=None, help="read the shared secret from this file")
    p.add_argument("--initial", type=Path, default=None, help="the team's starting parameters: a .pt state_dict of "
                   "the model or a .npy flat float32 file (default: the first worker's)")
    a = p.parse_args(argv)
    try:
        if a.workers < 1:
            raise ConfigError(f"--workers {a.workers}: give at least 1")
        try:
            key = load_secret(path=a.secret_file) if a.secret_file else load_secret()
        except ValueError as e:
            raise ConfigError(str(e)) from None
        model = load_factory(a.model)()
        try:
            served = serve(model, workers=a.workers, port=a.port, host=a.host, policy=a.policy,
                           threshold=a.threshold, compression=a.compression, secret=key, wait=False,
                           initial=a.initial)
        except ValueError as e:
            raise ConfigError(f"{e}") from None
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"rog-server: {served.ps.partition.n_elements} parameters in {served.ps.partition.n_rows} rows, "
          f"{a.workers} worker(s), {a.policy}, listening on {served.address[0]}:{served.address[1]}", flush=True)
    try:
        ps = served.wait()
    except KeyboardInterrupt:
        served.close()
        return 130
    except RuntimeFailure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"rog-server: done; finished workers {ps.finished_workers}, gone {ps.failed_workers}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
