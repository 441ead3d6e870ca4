"""Stand-ins for what DDP hands a comm hook (shared by the DDP baseline's tests)."""

from __future__ import annotations


class FakeBucket:
    """A flat gradient buffer, and whether it is the iteration's last bucket."""

    def __init__(self, values, last):
        import torch

        self._buf, self._last = torch.tensor(values, dtype=torch.float32), last

    def buffer(self):
        return self._buf

    def is_last(self):
        return self._last
