"""The live progress line: per-worker iterations, time composition and worker 0's accuracy, read from
the growing event logs (local files, or remote ones mirrored into the run folder as they grow)."""

from __future__ import annotations

import json
from pathlib import Path


class Tail:
    """Reads the complete new lines of a growing JSON-lines file (local, or remote through ``reader(offset)
    -> bytes``; then every byte read is also appended to ``path``, a live local mirror)."""

    def __init__(self, path: Path, reader=None) -> None:
        self.path, self.pos, self.buf, self.reader = path, 0, b"", reader

    def read(self) -> list[dict]:
        if self.reader is not None:
            data = self.reader(self.pos)
            if data:
                with open(self.path, "ab") as f:
                    f.write(data)
        else:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.pos)
                    data = f.read()
            except FileNotFoundError:
                return []
        self.pos += len(data)
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        return out


class Progress:
    """Per-worker progress from the event logs: iterations done, time composition, worker 0's accuracy."""

    def __init__(self, run_dir: Path, n_workers: int, readers: dict | None = None) -> None:
        """``readers``: event rank -> ``reader(offset) -> bytes`` of that rank's remote event log
        (--launcher fabric); the logs are then mirrored into ``run_dir`` while the run goes on."""
        self.tails = [Tail(run_dir / f"events-w{k}.jsonl", None if readers is None else readers[f"w{k}"])
                      for k in range(n_workers)]
        self.extra = [] if readers is None else [Tail(run_dir / f"events-{r}.jsonl", f) for r, f in readers.items()
                                                 if not r.startswith("w")]
        self.done = [0] * n_workers
        self.time = {"compute": 0.0, "push": 0.0, "pull": 0.0, "stall": 0.0}
        self.accuracy: float | None = None

    def update(self) -> None:
        for tail in self.extra:  # mirrored only (the PS's log)
            tail.read()
        for k, tail in enumerate(self.tails):
            for rec in tail.read():
                kind = rec.get("kind")
                if kind in self.time:
                    self.time[kind] += float(rec.get("duration_s", 0.0))
                if kind == "pull":
                    self.done[k] = max(self.done[k], int(rec["iteration"]))
                if kind == "eval" and not rec.get("flushed"):
                    self.accuracy = float(rec["accuracy"])

    def stall_share(self) -> float:
        total = sum(self.time.values())
        return self.time["stall"] / total if total > 0 else 0.0

    def show(self, bar) -> None:
        """Update a tqdm bar: iterations (the slowest worker), worker 0's accuracy, stall share (ETA: tqdm's)."""
        bar.n = min(self.done) if self.done else 0
        acc = "-" if self.accuracy is None else f"{100 * self.accuracy:.1f}%"
        bar.set_postfix_str(f"acc {acc} stall {100 * self.stall_share():.0f}%", refresh=True)

