"""The parameter server's scheduler thread for policies with a server-side scheduler (ADSP).

From the moment every worker has joined (the scheduler's clock: seconds since then) it calls
:meth:`~rog.policies.base.Policy.schedule` every ``policy.scheduler_period_s`` under the server's
lock.  When the policy :meth:`~rog.policies.base.Policy.wants_loss`, it first evaluates the
server's ``global_loss(total)`` outside the lock (``total``: the sum of every committed push, so the
PS's model is the initial one minus it).  The returned records are logged as ``schedule`` events
and kept in ``server.schedule_records``; the rates they hand out are pushed to every worker at once
(:mod:`rog.runtime.rate_broadcast`; ``server.rate_broadcaster``).  A failing scheduler lands in ``server.errors`` and stops;
training goes on at the rates last handed out.
"""

from __future__ import annotations

import time

from .rate_broadcast import RateBroadcaster

_POLL_S = 0.25  # how often the thread checks whether every worker has joined


def wait_until_joined(ps) -> None:
    """Block until every worker has joined ``ps`` (or the run ended): the origin of the scheduler's clock."""
    with ps.cond:
        while len(ps.membership.joined) < ps.n_workers and not (ps.ended or ps.stopping.is_set()):
            ps.cond.wait(_POLL_S)


def scheduler_loop(ps) -> None:
    """Thread body: tick ``ps.policy``'s scheduler until the run ends (``ps``: a ParameterServer)."""
    period = float(ps.policy.scheduler_period_s)
    wait_until_joined(ps)
    t0 = time.monotonic()
    ps.rate_broadcaster = broadcaster = RateBroadcaster(ps)
    while not ps.stopping.wait(period):
        if ps.ended:
            return
        now = time.monotonic() - t0
        try:
            with ps.cond:
                want = ps.global_loss is not None and ps.policy.wants_loss(now)
                total = ps.state.total.copy() if want else None
            loss = float(ps.global_loss(total)) if want else None
            with ps.cond:
                records = ps.policy.schedule(now, ps.server_view(), loss)
                ps.schedule_records.extend(records)
            for rec in records:
                ps.log_while_running("schedule", t0 + now, **rec)  # the run may have ended since the tick
            broadcaster.after_tick(records)
        except Exception as e:  # noqa: BLE001 - reported through ps.errors
            with ps.cond:
                ps.errors.append((-1, e))
            return
