"""Runtime faults in one process: links cut mid-push, acknowledgements lost in both directions, a
worker process restarted from scratch, eviction and a late rejoin, a parameter-server restart from
its checkpoint, and the checkpoint files themselves.

Workers are threads over in-process connections; each has a reconnect factory that makes a new
in-process pair and hands the PS end to whichever parameter server is running.  Faults are injected
by a pipe wrapper at exact protocol points (the k-th piece of a push, the Ack of a push or a pull),
never by timing.  Every run ends with the conservation check, computed from the workers' side only:
worker ``r`` holds ``w0 - sum_e (sum of e's updates - e's undelivered accumulator) / W + pending[r]``
(``pending`` is 0 after the flush with compression off), within 1e-5 relative.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rog.codecs.compression import RawCodec, SignCodec
from rog.policies import make_policy
from rog.runtime import ParameterServer, WorkerEngine, aligned_zeros
from rog.runtime.messages import PushDone, Rejoin, RejoinReply, Resync
from rog.runtime.ps_checkpoint import PSCheckpointError, latest_ps_checkpoint, save_ps_checkpoint
from rog.transport import LinkClosed, inproc_pair
from rog.transport.messages import ENVELOPE, MessageParser, encode_message
from test_runtime_server import CHUNK, PART, RULE, Recording, _wait_until, quadratic_grad

PIECE, ACK = 17, 19  # transport message types (rog.transport.messages)


class FaultyPipe:
    """Wraps a pipe; ``rule(data) -> None | "cut" | "drop"`` is asked for every write once armed.

    ``cut``: the link breaks before the message leaves.  ``drop``: the message is lost in transit and
    the link breaks at this end's next read (what a peer sees when a link dies after a send)."""

    def __init__(self, inner) -> None:
        self.inner, self.rule, self.doomed, self.fired = inner, None, False, 0

    def write(self, data: bytes) -> None:
        if self.rule is not None:
            act = self.rule(data)
            if act is not None:
                self.rule, self.fired = None, self.fired + 1
                if act == "cut":
                    self.inner.abort()
                    raise LinkClosed("injected: link cut")
                self.doomed = True
                return
        self.inner.write(data)

    def read_some(self, timeout_s):
        if self.doomed:
            self.inner.abort()
            raise LinkClosed("injected: link cut after a lost message")
        return self.inner.read_some(timeout_s)

    def wait_writable(self, until):
        return self.inner.wait_writable(until)

    def close(self):
        self.inner.close()

    def abort(self):
        self.inner.abort()


def mtype(data: bytes) -> int:
    return ENVELOPE.unpack_from(data)[2]


def nth_piece(k: int):
    count = [0]

    def rule(data):
        if mtype(data) == PIECE:
            count[0] += 1
            return "cut" if count[0] == k else None
        return None

    return rule


def drop_ack(data):
    return "drop" if mtype(data) == ACK else None


class _Died(BaseException):
    """The worker process was killed (not an error of the run)."""


class FaultRun:
    """A PS (replaceable: crash and resume) and W worker threads with reconnecting in-process links."""

    def __init__(self, name, s=None, *, W=3, N=6, codec=None, evict_after_s=30.0, ckpt_dir=None, hooks=None,
                 iterations=None):
        self.name, self.s, self.W, self.N = name, s, W, N
        self.codec = codec or RawCodec()
        self.evict_after_s, self.ckpt_dir = evict_after_s, ckpt_dir
        self.hooks = hooks or {}  # (worker, iteration) -> callable(run, worker) before that step
        self.iterations = iterations or [N] * W
        self.w0 = np.random.default_rng(42).standard_normal(PART.n_elements).astype(np.float32)
        self.grad = quadratic_grad(PART, W)
        self.ps = None
        self.ps_down = False
        self.ps_ends: list = []  # (ps, worker, ps-side connection) of every link made
        self.engines: dict = {}  # worker -> [engine, ...] (a restarted worker has several)
        self.params: dict = {}
        self.errors: dict = {}
        self.lock = threading.Lock()
        self.ps_runs: list = []
        self.die: set = set()  # workers whose process dies at their next reconnect attempt
        self.next_rule: dict = {}  # worker -> FaultyPipe rule for the worker end of its next link

    # -------------------------------------------------------------- the parameter server
    def start_ps(self, resume: bool = False):
        ps = ParameterServer(PART, self.W, make_policy(self.name, self.s), self.codec, chunk_bytes=CHUNK,
                             wait_timeout_s=30.0, join_timeout_s=30.0, evict_after_s=self.evict_after_s)
        if resume:
            ps.checkpoints.resume(self.ckpt_dir)
        if self.ckpt_dir is not None:
            ps.checkpoints.start(self.ckpt_dir, 3600.0)  # written on demand by the tests (checkpoint_now)
        thread = ps.start([])
        with self.lock:
            self.ps, self.ps_down = ps, False
            self.ps_runs.append((ps, thread))
        return ps

    def crash_ps(self):
        """The PS process dies: every connection drops at once, its memory is gone."""
        with self.lock:
            ps, self.ps_down = self.ps, True
            ends = [c for p, _, c in self.ps_ends if p is ps]
        for c in ends:
            c.abort()
        ps.stop()

    def link(self, r):
        def connect():
            with self.lock:
                ps, down = self.ps, self.ps_down
            if r in self.die:
                self.die.discard(r)
                raise _Died(f"worker {r} was killed")
            if ps is None or down:
                raise LinkClosed("parameter server unreachable")
            w_end, ps_end = inproc_pair(r)
            w_end.pipe, ps_end.pipe = FaultyPipe(w_end.pipe), FaultyPipe(ps_end.pipe)
            w_end.pipe.rule = self.next_rule.pop(r, None)  # a fault armed for this worker's next link
            with self.lock:
                self.ps_ends.append((ps, r, ps_end))
            ps.add_connection(ps_end)
            return w_end

        return connect

    def ps_end(self, r):
        """The newest PS-side connection of worker r."""
        with self.lock:
            return [c for _, w, c in self.ps_ends if w == r][-1]

    # -------------------------------------------------------------- workers
    def worker(self, r, fresh=False, first=1):
        try:
            params = aligned_zeros(PART.n_elements)
            params[:] = self.w0
            connect = self.link(r)
            eng = WorkerEngine(connect(), PART, params, make_policy(self.name, self.s), self.codec,
                               Recording(PART.n_elements, RULE), chunk_bytes=CHUNK, wait_timeout_s=30.0,
                               reconnect=connect, reconnect_timeout_s=30.0, rejoin=fresh)
            with self.lock:
                self.engines.setdefault(r, []).append(eng)
                self.params[r] = params
            eng.join(30.0)
            for n in range(first, self.iterations[r] + 1):
                hook = self.hooks.get((r, n)) if not fresh else None
                if hook is not None:
                    hook(self, r)
                eng.step(self.grad(r, params, n))
            eng.flush()
            eng.close()
        except _Died:
            pass  # the engine, its model and its accumulator are gone with the "process"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors[r] = e

    def spawn(self, r, **kw):
        t = threading.Thread(target=self.worker, args=(r,), kwargs=kw, daemon=True)
        t.start()
        return t

    def go(self, extra=()):
        self.start_ps()
        threads = [self.spawn(r) for r in range(self.W)] + list(extra)
        for t in threads:
            t.join(60)
        return self

    def finish(self, threads=()):
        for t in threads:
            t.join(60)
        for ps, t in self.ps_runs:
            t.join(60)
            assert not t.is_alive(), "a parameter server did not finish"
        assert not self.errors, self.errors
        ps = self.ps_runs[-1][0]
        assert ps.finished_workers == list(range(self.W)), (ps.finished_workers, ps.errors)
        return self

    def reference(self, r):
        """What worker r must hold: from the workers' own records only (updates minus undelivered)."""
        committed = np.zeros(PART.n_elements, dtype=np.float64)
        for engines in self.engines.values():
            for e in engines:
                committed += sum((u.astype(np.float64) for u in e.local.updates), np.zeros(PART.n_elements))
                committed -= e.acc
        return self.w0 - committed / self.W + self.ps_runs[-1][0].state.pending[r]


def assert_conserved(run: FaultRun):
    scale = float(np.abs(run.w0).max())
    for r in range(run.W):
        np.testing.assert_allclose(run.params[r], run.reference(r), rtol=1e-5, atol=1e-5 * scale, err_msg=f"worker {r}")


def faults(ps, event):
    return [f for f in ps.faults if f["event"] == event]


# ----------------------------------------------------------------------------- lost links and lost acks
@pytest.mark.parametrize("name, s", [("ROG", 2), ("SSP", 1)])
def test_link_cut_mid_push_reconnects_and_applies_nothing_partial(name, s):
    def cut(run, r):
        run.engines[r][-1].conn.pipe.rule = nth_piece(2)  # the second piece of this push: mid-push

    run = FaultRun(name, s, hooks={(1, 3): cut}).go()
    run.finish()
    ps = run.ps
    eng = run.engines[1][0]
    assert eng.conn.pipe is not None and eng.reconnects == 1
    assert [f["worker"] for f in faults(ps, "worker_rejoined")] == [1]
    assert not faults(ps, "worker_evicted")
    assert eng.push_seq == ps.state.push_seq[1]  # the cut push counted nowhere: both ends agree on every push
    assert_conserved(run)


def test_push_ack_lost_commits_exactly_once():
    """The PS applied the push but the link died before its Ack arrived: the rejoin reply carries the
    PS's push count and kept frames; the worker commits exactly those (no double count, no loss)."""

    def lose_ack(run, r):
        run.ps_end(r).pipe.rule = drop_ack

    run = FaultRun("ROG", 2, hooks={(0, 4): lose_ack}).go()
    run.finish()
    assert run.ps_end(0).pipe.fired == 0  # the newest link is the one after the rejoin
    assert run.engines[0][0].reconnects == 1
    assert run.engines[0][0].push_seq == run.ps.state.push_seq[0]
    assert_conserved(run)


def test_pull_ack_lost_is_resent_and_subtracted_once():
    """The worker applied a pull whose Ack was lost: on rejoin it re-sends that pull's chunks and the
    PS subtracts them from its pending buffer (otherwise the flush would deliver them twice)."""

    def lose_ack(run, r):
        run.engines[r][-1].conn.pipe.rule = drop_ack

    run = FaultRun("SSP", 1, hooks={(2, 3): lose_ack}).go()
    run.finish()
    rej = faults(run.ps, "worker_rejoined")
    assert [(f["worker"], f["pull_frames"] > 0) for f in rej] == [(2, True)]
    assert run.engines[2][0].pull_seq == run.ps.state.pull_seq[2]
    assert_conserved(run)


def test_a_rejoin_cut_during_its_resync_is_lost_again_and_retried():
    """The pull Ack is lost (the rejoin must re-send that pull), and the link of the rejoin breaks at the
    first piece of the resync: the PS counts the worker lost again (not stuck half-joined), the worker
    retries, and the third link settles everything exactly once."""

    def lose_ack_then_cut_resync(run, r):
        run.engines[r][-1].conn.pipe.rule = drop_ack
        run.next_rule[r] = nth_piece(1)

    run = FaultRun("SSP", 1, hooks={(2, 3): lose_ack_then_cut_resync}).go()
    run.finish()
    assert [f["worker"] for f in faults(run.ps, "worker_lost")] == [2, 2]
    assert [f["worker"] for f in faults(run.ps, "worker_rejoined")] == [2]
    assert run.engines[2][0].reconnects == 1 and not run.next_rule
    assert_conserved(run)


def test_sign_codec_invariant_holds_across_a_reconnect():
    def lose_ack(run, r):
        run.ps_end(r).pipe.rule = drop_ack

    run = FaultRun("ROG", 2, codec=SignCodec(), hooks={(1, 3): lose_ack}).go()
    run.finish()
    assert run.engines[1][0].reconnects == 1
    assert_conserved(run)  # with pending[r] and every accumulator's residual in the reference
    assert any(np.abs(e.acc).max() > 0 for es in run.engines.values() for e in es)  # residuals really exist


class HeldBreak:
    """Wraps the PS end's pipe: a read that finds the link broken waits until ``release()`` is true before it
    raises, so the worker (which broke the link) is certain to come back on a new link first.  No timing: the
    hold ends on a state of the PS, or after ``limit_s`` (then the test fails on its assertions, never hangs)."""

    def __init__(self, inner, release, limit_s=30.0) -> None:
        self.inner, self.release, self.limit_s, self.held = inner, release, limit_s, 0

    def read_some(self, timeout_s):
        try:
            return self.inner.read_some(timeout_s)
        except LinkClosed:
            self.held += 1
            _wait_until(self.release, "the worker's new link to take over", self.limit_s)
            raise

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_link_the_worker_finds_broken_first_is_lost_exactly_once():
    """Issue 49's race, made certain: the worker's push breaks its link and it reconnects at once; the PS end's
    read of the broken link is held until the Rejoin's link is current.  The loss is recorded once (by the
    rejoin, which saw it first), the rejoin carries ``gap_s``, and the old link's thread adds nothing."""
    held = {}

    def cut_and_hold(run, r):
        run.engines[r][-1].conn.pipe.rule = nth_piece(2)  # the worker's own write finds the link cut
        old = run.ps_end(r)
        held[r] = old.pipe = HeldBreak(old.pipe, lambda: run.ps.membership.conns.get(r) not in (None, old))

    run = FaultRun("ROG", 2, hooks={(1, 3): cut_and_hold}).go()
    run.finish()
    assert held[1].held == 1, "the PS end never read the broken link (the scenario did not happen)"
    lost = faults(run.ps, "worker_lost")
    assert [(f["worker"], f["noticed_by"]) for f in lost] == [(1, "rejoin")]
    (rej,) = faults(run.ps, "worker_rejoined")
    assert rej["worker"] == 1 and rej["gap_s"] >= 0.0
    assert lost[0]["heard_s_ago"] >= 0.0
    assert run.engines[1][0].reconnects == 1
    assert_conserved(run)


def test_a_worker_that_notices_first_while_the_ps_waits_at_its_gate_is_lost_exactly_once():
    """The fault bench's case without any race: BSP, worker 1 pushes iteration 3 and its link dies right after
    its PushDone, while its PS thread waits at the gate for worker 0 (held back until worker 1 has rejoined).
    The PS thread at the gate is superseded, never reads the dead link: the rejoin records the loss."""
    rejoined = threading.Event()

    def break_after_push_done(run, r):
        pipe = run.engines[r][-1].conn.pipe

        def rule(data):
            if mtype(data) == PushDone.TYPE:
                pipe.inner.write(data)  # delivered, then the link dies at the worker's next read
                return "drop"
            return None

        pipe.rule = rule

    def hold_worker_0(run, r):
        _wait_until(lambda: faults(run.ps, "worker_rejoined"), "worker 1 to rejoin", 30.0)
        rejoined.set()

    run = FaultRun("BSP", None, hooks={(1, 3): break_after_push_done, (0, 3): hold_worker_0}).go()
    run.finish()
    assert rejoined.is_set()
    lost = faults(run.ps, "worker_lost")
    assert [(f["worker"], f["noticed_by"]) for f in lost] == [(1, "rejoin")]
    (rej,) = faults(run.ps, "worker_rejoined")
    assert rej["worker"] == 1 and "gap_s" in rej
    assert_conserved(run)


# ----------------------------------------------------------------------------- crash and restart of a worker
def test_worker_killed_mid_push_restarts_fresh_and_holds_the_same_model():
    """Worker 1 dies in the middle of its push of iteration 4 (the link breaks after one piece and the
    engine is gone with its model and accumulator); a new engine for worker 1 starts from the initial
    model with rejoin=True, receives everything committed, and finishes the run."""

    def die_mid_push(run, r):
        run.engines[r][-1].conn.pipe.rule = nth_piece(2)
        run.die.add(r)  # its reconnect attempt finds the process gone

    run = FaultRun("ROG", 2, W=3, N=7, hooks={(1, 4): die_mid_push})
    run.start_ps()
    threads = [run.spawn(r) for r in range(3)]
    _wait_until(lambda: faults(run.ps, "worker_lost"), "the PS to notice the crash")
    threads.append(run.spawn(1, fresh=True, first=4))
    run.finish(threads)
    ps = run.ps
    (rej,) = faults(ps, "worker_rejoined")
    assert rej["worker"] == 1 and rej["fresh"] and not rej["evicted"]
    first, second = run.engines[1]
    assert first.iteration == 3 and first.acc.any(), "the crashed worker lost nothing (the scenario did not happen)"
    assert second.iteration == 7 and second.pull_seq == ps.state.pull_seq[1]
    assert_conserved(run)  # the lost accumulator is excluded from the reference, and from every model


def test_eviction_lets_the_others_go_on_and_a_late_rejoin_catches_up():
    """SSP(1), W=3, evict after 0.2 s: worker 2 vanishes before iteration 2; the others stall, then it
    is evicted (warning) and they run past the threshold; it comes back (state intact), is moved up
    to the slowest active worker, and everything it computed still reaches every model."""
    back = threading.Event()

    def vanish(run, r):
        run.engines[r][-1].conn.abort()
        _wait_until(lambda: faults(run.ps, "worker_evicted") and min(run.engines[o][0].iteration for o in (0, 1)) >= 4,
                    "eviction and the others to move on")

    def wait_for_return(run, r):
        _wait_until(lambda: faults(run.ps, "worker_rejoined"), "worker 2 to come back")
        back.set()

    hooks = {(2, 2): vanish, (0, 6): wait_for_return, (1, 6): wait_for_return}
    run = FaultRun("SSP", 1, W=3, N=8, evict_after_s=0.2, hooks=hooks).go()
    run.finish()
    ps = run.ps
    (ev,) = faults(ps, "worker_evicted")
    assert ev["worker"] == 2 and ev["level"] == "warning"
    (rej,) = faults(ps, "worker_rejoined")
    assert rej["evicted"] and rej["iteration"] >= 4 and rej["gap_s"] > 0
    assert run.engines[2][0].iteration > 8 - 1  # moved up past the iterations it missed
    assert_conserved(run)


# ----------------------------------------------------------------------------- PS crash and restart
def test_ps_restart_from_checkpoint_loses_nothing(tmp_path):
    """Checkpoint after worker 0's iteration 2, crash the PS before its iteration 5 (pushes and pulls
    after the checkpoint exist on every worker), resume a new PS from the checkpoint: the workers
    reconnect, re-send what it lacks, and the models still conserve every committed update."""
    ckpt = tmp_path / "ps-ckpt"
    state = {}

    def checkpoint(run, r):
        state["seq"] = run.ps.checkpoints.checkpoint_now()

    def crash_and_restart(run, r):
        old = run.ps
        run.crash_ps()
        state["resumed"] = run.start_ps(resume=True)
        state["old"] = old

    run = FaultRun("ROG", 2, W=3, N=7, ckpt_dir=ckpt, hooks={(0, 3): checkpoint, (0, 5): crash_and_restart}).go()
    run.finish()
    new = state["resumed"]
    assert new is run.ps and new is not state["old"]
    (res,) = faults(new, "ps_resumed")
    assert res["checkpoint"] == state["seq"]
    rej = faults(new, "worker_rejoined")
    assert sorted(f["worker"] for f in rej) == [0, 1, 2]
    assert sum(f["push_frames"] for f in rej) > 0 and sum(f["pull_frames"] for f in rej) > 0  # resync really ran
    assert_conserved(run)


# ----------------------------------------------------------------------------- checkpoint files and messages
def test_ps_checkpoint_files_are_verified(tmp_path):
    arrays = dict(a=np.arange(10, dtype=np.float32), b=np.ones((2, 3), dtype=np.int64))
    for seq in (1, 2, 3):
        save_ps_checkpoint(tmp_path, seq, {k: v * seq for k, v in arrays.items()}, {"m": seq}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ps-000002.json", "ps-000002.npz", "ps-000003.json",
                                                            "ps-000003.npz"]
    got, info, problems = latest_ps_checkpoint(tmp_path)
    assert info["seq"] == 3 and not problems
    np.testing.assert_array_equal(got["a"], arrays["a"] * 3)
    data = bytearray((tmp_path / "ps-000003.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the newest: it is reported and the one before used
    (tmp_path / "ps-000003.npz").write_bytes(bytes(data))
    got, info, problems = latest_ps_checkpoint(tmp_path)
    assert info["seq"] == 2 and len(problems) == 1 and "sha256" in problems[0]
    np.testing.assert_array_equal(got["b"], arrays["b"] * 2)
    (tmp_path / "ps-000002.json").write_text("{")
    with pytest.raises(PSCheckpointError, match="no usable parameter-server checkpoint"):
        latest_ps_checkpoint(tmp_path)


def test_resume_refuses_a_checkpoint_of_another_model(tmp_path):
    ps = ParameterServer(PART, 2, make_policy("ROG", 2), RawCodec())
    ps.checkpoints.start(tmp_path, 3600.0)
    ps.checkpoints.checkpoint_now()
    other = ParameterServer(PART, 3, make_policy("ROG", 2), RawCodec())
    with pytest.raises(Exception, match="belongs to another run.*n_workers"):
        other.checkpoints.resume(tmp_path)


def test_rejoin_messages_round_trip():
    msgs = [Rejoin(2057, 47, 1, "ROG", 4, bytes(range(32)), True, 7, 6, 9, 8),
            RejoinReply(3, 7, 9, 4, 8, False), Resync(3, 2, 9, 8, 6)]
    parser = MessageParser()
    assert parser.feed(b"".join(encode_message(m) for m in msgs)) == msgs


def test_a_restarted_ps_appends_to_its_event_log(tmp_path):
    from rog.runtime import EventLog, read_events

    path = tmp_path / "events-ps.jsonl"
    with EventLog(path, "ps", "r1", 0.0) as log:
        log.write("run_start", n_workers=2)
    with open(path, "a") as f:
        f.write('{"kind":"push","t_s":1')  # the killed PS left half a line
    with EventLog(path, "ps", "r1", 0.0, append=True) as log:
        log.write("fault", event="ps_resumed", checkpoint=3, since_checkpoint_s=0.5)
    header, recs = read_events(path)  # one header, the half line gone, both runs' records
    assert header["run_id"] == "r1" and [r["kind"] for r in recs] == ["run_start", "fault"]
    with pytest.raises(ValueError, match="fault record: event must be one of"):
        EventLog(tmp_path / "x.jsonl", "ps", "r1").write("fault", event="meteor")
