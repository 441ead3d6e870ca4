"""Transport settings and the shared secret (read from the environment or a file, never from code)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .messages import MAX_PIECE_DATA
from .ratelimit import RateFn

SECRET_ENV = "ROG_SECRET"  # environment variable holding the shared secret
MIN_SECRET_BYTES = 16
_HOW_TO = "e.g. export ROG_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))') on every device"


def load_secret(env: str = SECRET_ENV, path: str | Path | None = None) -> bytes:
    """The shared secret: the contents of ``path`` if given, else the environment variable ``env``."""
    if path is not None:
        try:
            raw = Path(path).read_bytes().strip()
        except OSError as e:
            raise ValueError(f"secret file {path}: {e.strerror}") from None
        source = f"secret file {path}"
    else:
        value = os.environ.get(env)
        if value is None:
            raise ValueError(f"no shared secret: environment variable {env} is not set ({_HOW_TO})")
        raw = value.strip().encode("utf-8")
        source = f"environment variable {env}"
    if len(raw) < MIN_SECRET_BYTES:
        raise ValueError(f"{source} holds {len(raw)} bytes; the shared secret needs at least {MIN_SECRET_BYTES} ({_HOW_TO})")
    return raw


@dataclass(frozen=True)
class TransportConfig:
    """Settings of one end of a transport connection (every default explained inline)."""

    secret: bytes | None = None  # shared secret (load_secret()); needed by connect/Listener, not in-process
    handshake_timeout_s: float = 5.0  # a peer that has not completed the handshake by then is dropped
    io_timeout_s: float = 60.0  # longest silence tolerated inside a transmission or while awaiting its ack
    piece_bytes: int = 8 * 1024  # frame bytes per Piece: the deadline is checked between pieces
    sndbuf_bytes: int = 32 * 1024  # SO_SNDBUF request (Linux doubles it): bounds bytes queued in the kernel
    notsent_lowat_bytes: int = 8 * 1024  # TCP_NOTSENT_LOWAT: unsent bytes at which the socket reports writable
    rate_mbit_at: float | RateFn | None = None  # shape this end's writes (Mbit/s or a trace callable); None = no shaping
    burst_bytes: int = 16 * 1024  # token-bucket size when shaping
    drain_aware: bool = True  # refuse a speculative piece the send queue's drain rate says would arrive late
    max_frame_bytes: int = 256 * 1024 * 1024  # receiver bound on one frame, checked before allocating it
    link_delay_s: float = 0.0  # emulated per-transfer latency: each transmission's Begin leaves this long after its start

    def __post_init__(self) -> None:
        if self.secret is not None:
            if not isinstance(self.secret, (bytes, bytearray)):
                raise ValueError("secret must be bytes (use load_secret())")
            if len(self.secret) < MIN_SECRET_BYTES:
                raise ValueError(f"secret is {len(self.secret)} bytes; it needs at least {MIN_SECRET_BYTES} ({_HOW_TO})")
        for name in ("handshake_timeout_s", "io_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 1 <= self.piece_bytes <= MAX_PIECE_DATA:
            raise ValueError(f"piece_bytes must lie in [1, {MAX_PIECE_DATA}], got {self.piece_bytes}")
        for name in ("sndbuf_bytes", "notsent_lowat_bytes", "burst_bytes", "max_frame_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not (0.0 <= float(self.link_delay_s) <= 10.0):
            raise ValueError(f"link_delay_s must lie in [0, 10] s, got {self.link_delay_s!r}")
        if self.rate_mbit_at is not None and not callable(self.rate_mbit_at) and not float(self.rate_mbit_at) >= 0:
            raise ValueError(f"rate_mbit_at must be >= 0 Mbit/s, a callable, or None; got {self.rate_mbit_at!r}")

    def require_secret(self) -> bytes:
        """The secret, or a clear error if none was configured."""
        if self.secret is None:
            raise ValueError(f"TransportConfig.secret is not set; pass secret=load_secret() ({_HOW_TO})")
        return bytes(self.secret)
