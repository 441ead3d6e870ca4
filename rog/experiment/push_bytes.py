"""The frame bytes of a full push of a model: the regime's payload (cached, since it imports torch)."""

from __future__ import annotations

import json
from pathlib import Path

from rog.paths import repo_root

from .rundir import write_atomic


def cached_full_push_bytes(compression: str, cache_dir, model: str, chunk_share: float | None = None) -> int:
    """Frame bytes of a full push of ``model`` in chunks of ``chunk_share`` of its payload.  Building
    the model imports torch (seconds of CPU), so the answer is cached in ``<cache_dir>/push-bytes.json``
    under the share and a hash of the code it depends on (models, rows, codec, chunking, wire format)."""
    import hashlib

    root = repo_root()
    deps = sorted((root / "rog" / "models").glob("*.py")) + [root / "rog" / f for f in
                                                             ("rows.py", "codecs/compression.py", "chunks.py", "wire.py")]
    h = hashlib.sha256()
    for f in deps:
        h.update(f.read_bytes())
    key = f"{model}/{compression}/{chunk_share!r}/{h.hexdigest()[:16]}"
    path = Path(cache_dir) / "push-bytes.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return int(known[key])
    n = count_push_bytes(compression, model, chunk_share)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({**known, key: n}) + "\n")
    except OSError:
        pass
    return n


def count_push_bytes(compression: str, model: str, chunk_share: float | None = None) -> int:
    """Build ``model`` (torch) and count the frame bytes of its full push."""
    import torch

    from rog.codecs.codec_registry import make_codec
    from rog.experiment.traceplan import full_push_bytes
    from rog.models import make_model
    from rog.rows import RowPartition
    from rog.workloads.registry import DEFAULTS, QUICK_MODELS

    classes = DEFAULTS["quick"].num_classes if model in QUICK_MODELS else next(
        d.num_classes for d in DEFAULTS.values() if d.model == model)
    with torch.random.fork_rng(devices=[]):
        part = RowPartition.from_module(make_model(model, classes))
    return full_push_bytes(part, make_codec(compression), chunk_share)

