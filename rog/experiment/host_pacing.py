"""Compute pacing and the regime's compute time on ``--testbed hosts``, from each worker host's device profile.

On one machine every worker is paced to the run's profile (an x86 core standing for a robot).  A real
device computes at its own speed: a worker host whose profile's compute time was *measured* on that
device (``compute_basis: "measured: ..."``, e.g. ``jetson-xavier-nx``) is not paced; a profile whose
compute time is a target (``derived:`` or ``assumption:``, e.g. ``laptop``: paced to the Jetson's time
at its smaller batch, the paper's dynamic batching; ``quick-cpu``: an emulated robot) asks for pacing,
to that time x ``-b`` (x the worker's ``--compute-ratios`` entry when given).

The trace time scale follows the compute time the workers will show, as on the emulated testbed (where
they are paced to it): the mean over the run's workers of their profiles' ``compute_s_per_iteration``
(measured on the device, or the pace target), divided by the paper's (:func:`rog.experiment.traceplan.regime`).
An explicit ``--profile`` or ``--compute-s`` keeps the one-profile behaviour for every worker.
"""

from __future__ import annotations


def profile_asks_pacing(profile) -> bool:
    """A profile asks for pacing unless its compute time was measured on the device it names."""
    return not profile.compute_basis.strip().lower().startswith("measured:")


def host_pacing(hosts_file, batch_multiple: int, ratios=None) -> dict:
    """``config.yaml``'s ``hosts.pacing``: per worker (by worker id) its host, profile, whether it is paced,
    its pacing target (None: its own speed) and its expected compute time per iteration; the regime's
    compute time per mini-batch (``regime_compute_s``) and the pacing target shared by every worker
    (``common_compute_s``: None when any worker is unpaced or the targets differ).  ValueError names the host
    whose profile does not load."""
    from rog.testbed.profiles import ProfileError, load_profile

    workers = hosts_file.workers  # by worker id
    rows, bases = [], []
    for k, h in enumerate(workers):
        try:
            p = load_profile(h.device_profile)
        except ProfileError as e:
            raise ValueError(f"{hosts_file.source or 'hosts file'}: host {h.name}: device_profile: {e}") from None
        paced = profile_asks_pacing(p)
        ratio = float(ratios[k]) if ratios else 1.0
        per_iter = p.compute_s_per_iteration * int(batch_multiple) * ratio
        rows.append(dict(worker=k, host=h.name, profile=p.name, paced=paced, compute_s=per_iter if paced else None,
                         expected_compute_s=per_iter, compute_basis=p.compute_basis))
        bases.append(p.compute_s_per_iteration)
    targets = {r["compute_s"] for r in rows}
    return dict(workers=rows, regime_compute_s=sum(bases) / len(bases),
                common_compute_s=targets.pop() if len(targets) == 1 else None,
                profiles=sorted({r["profile"] for r in rows}))
