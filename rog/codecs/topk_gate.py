"""ScaDLES's adaptive-compression decision at the parameter server: a vote window and its majority.

Each worker reports, with the first chunk of every push, whether its smoothed energy statistic
says "compress" (:mod:`rog.codecs.codecs_topk`).  The parameter server keeps the latest ``n_workers``
votes (under BSP: exactly one per worker and iteration; under SSP and ROG: the most recent pushes,
a sliding window) and decides *compress* when at least half of the window votes for it: the
released code's ``votes >= floor(N/2)`` rule for an even number of workers, a strict majority for
an odd one.  The decision rides on every chunk of the next pulls, so each worker uses it for its
next push.  Before the first vote the decision is *dense*.
"""

from __future__ import annotations

import threading
import time
from collections import deque


class PSGate:
    """The vote window of ``n_workers`` pushes and the compress/dense decision it gives."""

    def __init__(self, n_workers: int) -> None:
        if isinstance(n_workers, bool) or int(n_workers) != n_workers or n_workers < 1:
            raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
        self.n_workers = int(n_workers)
        self._votes: deque[bool] = deque(maxlen=self.n_workers)
        self._lock = threading.Lock()
        self.decisions: list[dict] = []  # one record per change of the decision (t_unix_s, compress, votes)
        self._decision = False
        self.votes_seen = 0

    def record_vote(self, compress: bool, statistic: float) -> None:
        """One push's vote (and the worker's smoothed statistic, kept for the record)."""
        with self._lock:
            self._votes.append(bool(compress))
            self.votes_seen += 1
            yes = sum(self._votes)
            decision = yes >= 1 and 2 * yes >= self.n_workers
            if decision != self._decision or not self.decisions:
                self.decisions.append(dict(t_unix_s=time.time(), vote=self.votes_seen, compress=decision,
                                           votes_compress=yes, window=len(self._votes), statistic=float(statistic)))
            self._decision = decision

    @property
    def compress(self) -> bool:
        """The current decision: True = the next transmissions are Top-k, False = dense."""
        with self._lock:
            return self._decision
