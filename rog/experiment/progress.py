"""The live progress of a run, read from its growing event logs (local files, or remote ones mirrored into the
run folder as they grow): one :class:`Progress` for every launcher and for ``run_all.sh``'s status lines.

It tells the truth: during start-up the bar names the phase (testbed, parameter server, workers ready,
warm-up) and shows no rate; from the first iteration on, the rate and the ETA come from training
iterations only (the event clock: the first ``run_start`` to the last ``pull``'s end, the figure the run's
summary reports as ``train_s / iterations``); redraws are throttled by tqdm (``mininterval``, at most
:data:`REDRAWS_PER_S` a second).  :func:`closing_line` is the sentence a person reads at the end."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .rundir import GO_FILE, LAYOUT_FILE, PS_PORT_FILE, WORKERS_READY_FILE

REDRAWS_PER_S = 2  # the bar's redraws at most this often (tqdm's mininterval = 1 / this)
STILL_REDRAW_S = 5  # with nothing new (a long start-up phase), the bar's clock is redrawn this often
TIME_KINDS = ("compute", "push", "pull", "stall")


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


def _fmt_eta(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class Progress:
    """Per-worker progress from the event logs: iterations (pulls), time composition, worker 0's accuracy,
    the training clock (first ``run_start`` to last ``pull`` end) and the start-up phase."""

    def __init__(self, run_dir: Path, n_workers: int, readers: dict | None = None, total: int | None = None,
                 label: str = "", clock=time.monotonic, budget_s: float | None = None) -> None:
        """``readers``: event rank -> ``reader(offset) -> bytes`` of that rank's remote event log
        (--launcher fabric); the logs are then mirrored into ``run_dir`` while the run goes on.  ``total``:
        the iterations the bar counts to (None: no count, a budget run); ``label``: the bar's name (the run id);
        ``budget_s``: the run's time budget (the ETA is what is left of it)."""
        self.run_dir, self.n_workers, self.total, self.label, self.clock = Path(run_dir), n_workers, total, label, clock
        self.budget_s = budget_s
        self.tails = [Tail(self.run_dir / f"events-w{k}.jsonl", None if readers is None else readers[f"w{k}"])
                      for k in range(n_workers)]
        self.extra = [] if readers is None else [Tail(self.run_dir / f"events-{r}.jsonl", f) for r, f in readers.items()
                                                 if not r.startswith("w")]
        self.done = [0] * n_workers  # pulls (iterations) per worker
        self.time = {k: 0.0 for k in TIME_KINDS}
        self.accuracy: float | None = None
        self.t_start_s: float | None = None  # event clock: the first run_start
        self.t_last_s: float | None = None  # event clock: the latest pull's end
        self.phase = "launcher (testbed, children)"  # set by the launcher (testbed, children) or read from the run folder's files
        self.t0 = clock()
        self.bar = None

    # ---- reading
    def update(self) -> None:
        """Read what the logs gained since the last call."""
        for tail in self.extra:  # mirrored only (the PS's log)
            tail.read()
        for k, tail in enumerate(self.tails):
            for rec in tail.read():
                self.add(k, rec)

    def add(self, k: int, rec: dict) -> None:
        """Count one event record of worker ``k``."""
        kind = rec.get("kind")
        if kind in self.time:
            self.time[kind] += float(rec.get("duration_s", 0.0))
        if kind == "run_start":
            t = float(rec["t_s"])
            self.t_start_s = t if self.t_start_s is None else min(self.t_start_s, t)
        elif kind == "pull":
            self.done[k] += 1
            end = float(rec["t_s"]) + float(rec.get("duration_s", 0.0))
            self.t_last_s = end if self.t_last_s is None else max(self.t_last_s, end)
        elif kind == "eval" and not rec.get("flushed") and rec.get("worker", k) == 0:
            self.accuracy = float(rec["accuracy"])

    @property
    def iterations(self) -> int:
        """Iterations every worker has done (the slowest worker's)."""
        return min(self.done) if self.done else 0

    def stall_share(self) -> float:
        total = sum(self.time.values())
        return self.time["stall"] / total if total > 0 else 0.0

    def train_s(self) -> float | None:
        """Training seconds so far (event clock: the first run_start to the latest pull's end)."""
        if self.t_start_s is None or self.t_last_s is None:
            return None
        return max(0.0, self.t_last_s - self.t_start_s)

    def s_per_it(self) -> float | None:
        """Training seconds per iteration so far (None before the first iteration)."""
        t, n = self.train_s(), self.iterations
        return t / n if t is not None and n > 0 else None

    def current_phase(self) -> str:
        """``training`` once an iteration is done; before, the start-up phase the run folder shows."""
        if self.iterations > 0:
            return "training"
        d = self.run_dir
        if self.t_last_s is not None or (d / GO_FILE).exists():
            return "warm-up (first iteration)"
        if (d / WORKERS_READY_FILE).exists():
            return "links starting"
        ready = sum(1 for k in range(self.n_workers) if (d / f"w{k}.ready").exists())
        if ready:
            return f"workers {ready}/{self.n_workers} ready"
        if (d / PS_PORT_FILE).exists():
            return "workers starting (torch, data)"
        if self.phase == "parameter server starting" and not (d / LAYOUT_FILE).exists():
            return "worker host: torch, model and data (pre-training)"  # the PS waits for the model's layout
        return self.phase

    # ---- showing
    def open_bar(self, file) -> None:
        """A tqdm bar on ``file``; its redraws throttled by tqdm to :data:`REDRAWS_PER_S` a second."""
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, desc=self.label, unit="it", file=file, mininterval=1.0 / REDRAWS_PER_S, miniters=0,
                        bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
                        if self.total else "{desc}: {n_fmt} it [{elapsed}{postfix}]")
        self._drawn = None
        self.show()

    def postfix(self) -> str:
        """``starting: <phase>, 12 s`` before training; then s/it, ETA, worker 0's accuracy, stall share."""
        phase = self.current_phase()
        if phase != "training":
            return f"starting: {phase}"
        rate, n = self.s_per_it(), self.iterations
        left = [rate * max(0, self.total - n)] if rate is not None and self.total else []
        left += [max(0.0, self.budget_s - (self.train_s() or 0.0))] if self.budget_s is not None else []
        eta = f", ETA {_fmt_eta(min(left))}" if left else ""
        acc = "-" if self.accuracy is None else f"{100 * self.accuracy:.1f}%"
        return (f"{'-' if rate is None else f'{rate:.2f}'} s/it{eta}, acc {acc}, "
                f"stall {100 * self.stall_share():.0f}%")

    def show(self, bar=None) -> None:
        """Update the bar (``bar`` or the one :meth:`open_bar` made); tqdm redraws it at most
        :data:`REDRAWS_PER_S` times a second (``update`` goes through its ``mininterval``; no forced refresh)."""
        bar = bar if bar is not None else self.bar
        if bar is None:
            return
        state = (self.postfix(), self.iterations, int(self.clock() - self.t0) // STILL_REDRAW_S)
        if state == getattr(self, "_drawn", None):
            return  # nothing new to show: no redraw (a quiet start-up still redraws every STILL_REDRAW_S)
        bar.set_postfix_str(state[0], refresh=False)
        printed = bar.last_print_t
        bar.update(state[1] - bar.n)  # tqdm redraws only when mininterval has passed
        if bar.last_print_t != printed:
            self._drawn = state

    def close(self) -> None:
        """The bar's last drawing (final figures), then a new line."""
        if self.bar is not None:
            self.bar.n = self.iterations
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            self.bar.close()
            self.bar = None

    def status(self) -> str:
        """One line for a plan's status: phase before training; iterations, s/it and stall share after."""
        phase = self.current_phase()
        if phase != "training":
            return f"starting: {phase}"
        rate = self.s_per_it()
        return (f"{self.iterations} it{'' if rate is None else f' ({rate:.2f} s/it)'}, "
                f"stall {100 * self.stall_share():.0f}%")


def closing_line(summary: dict, status: str, reason: str, run_dir: Path) -> str:
    """The sentence a person reads at the end of a run: run id, status, iterations, training time, where."""
    n, train = summary.get("iterations") or 0, summary.get("train_s")
    per = f" ({train / n:.2f} s/it)" if train and n else ""
    took = f"{n} iterations in {train:.1f} s of training{per}" if train is not None else f"{n} iterations"
    wall = summary.get("wall_s")
    wall_txt = f", {wall:.0f} s wall" if isinstance(wall, (int, float)) else ""
    if status == "done":
        return f"done: {run_dir.name} DONE, {took}{wall_txt}; results in {run_dir}"
    return f"INCOMPLETE: {run_dir.name} ({reason or 'stopped'}), {took}{wall_txt}; partial results in {run_dir}"


def for_run(cfg, run_dir: Path, readers: dict | None = None) -> Progress:
    """The :class:`Progress` of a run (``cfg``: its RunConfig): counting to its iterations, or, for a budget run
    without an iteration count, no count and an ETA from the budget."""
    from .config import BUDGET_ITERATION_CAP

    w = cfg.workload
    counted = w.time_budget_s is None or w.iterations < BUDGET_ITERATION_CAP
    return Progress(run_dir, cfg.testbed.workers, readers=readers, total=w.iterations if counted else None,
                    label=cfg.output.run_id, budget_s=w.time_budget_s)
