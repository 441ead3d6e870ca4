#!/usr/bin/env python
"""Run one experiment: a parameter server and N workers as processes on this machine.

    python scripts/run.py --testbed emulated --library BSP -c outdoors --iterations 50
    python scripts/run.py --testbed loopback --library ROG --threshold 4 --iterations 300

Testbed ``emulated`` (the default when run as root and ``ip netns`` works): one network namespace
per device (:mod:`rog.experiment.emulated`, :class:`rog.testbed.netns.Testbed` with a run-specific
prefix), the parameter server inside the PS namespace (bound to 0.0.0.0), every worker inside its own
namespace (the worker host starts one fresh interpreter per worker, and each enters its namespace with
``setns`` before importing torch or opening a socket), and ``tc`` replaying each worker's trace on its link: uplink
(worker end's egress) and, with ``--shape both`` (default), downlink (PS end's egress; the original
artifact left it unshaped: ``--shape uplink``).  The testbed is destroyed on completion, Ctrl-C,
SIGTERM/SIGHUP and failure, and the run checks that nothing with its prefix is left.  Without root
or working namespaces it falls back, with a warning, to loopback with the transport's token bucket
following the same per-worker schedules (worker side for pushes, PS side per connection for pulls).

Testbed ``loopback``: every process talks over 127.0.0.1; links are shaped, if at all, by the
transport's own token bucket (``--rate-mbit``, each direction of each worker link, or a trace with
``-c``), not by ``tc``.  Its default is ``-c none``.  Unshaped (``-c none``) runs are not paced unless
``--profile`` or ``--compute-s`` asks; trace runs are.  ``--rate-mbit R`` (constant rate) implies
``-c none`` and shapes with ``tc`` on the emulated testbed.

Testbed ``hosts`` (real devices, :mod:`rog.deploy`): ``--hosts FILE`` names the parameter server
and the workers (``configs/hosts.example.yaml``; the worker count comes from the file; per host
``runtime: native`` or ``docker``).  ``--dry-run`` prints the run's plan (hosts, every command, every
file) without connecting anywhere or writing the run folder.  Without it the plan runs with Fabric
(:class:`rog.deploy.fabric_runner.FabricRunner`, key-based SSH): ``--child prepare`` here writes the
model layout and pre-trains once, then every host gets the code (content-addressed tarball),
``config.yaml``, ``layout.json``, the weights and the trace; the PS (``--child ps``) starts first,
then the trace replays (``scripts/tc_replay.py``, held), the power samplers (real devices only: the
emulated devices' energy is the state model, computed afterwards as with the local launcher) and the workers
(``--child worker``); once every worker wrote ``worker.ready`` the launcher writes ``links.ready`` on
every host, releasing replays and training together.  A live progress line (iterations, worker 0's
accuracy, stall share, ETA) follows the remote event logs, which are mirrored into the run folder as
they grow; on completion, Ctrl-C, SIGTERM or any failure every remote process is stopped and every
host's run folder is copied back into ``hosts/<host>/`` (event, replay and power logs also into the
run folder).

Launchers (``--launcher``): ``fabric`` drives the emulated testbed through the SAME path as real
devices, with one private sshd per namespace (:class:`rog.experiment.emulated.EmulatedHosts`); it is
the default when sshd is installed (else ``local`` with a warning: ``bash scripts/setup_sshd.sh``
installs it).  ``local`` starts the processes here (below); loopback runs always use it.

Traces and regime (:mod:`rog.experiment.traceplan`): ``-c outdoors|indoors`` picks the full record
in ``data/bw_records/`` if ``utils/download_data.sh`` fetched it, else the synthetic
``configs/traces/<control>-synth.csv`` (the run's config and summary.md say which); ``--trace FILE`` overrides, ``-c none`` is
unshaped.  Every worker replays the trace from its own offset (default evenly spread); the replays
start when the worker host is ready to connect (``workers.ready`` -> ``links.ready``), so training
meets the traces at the configured offsets whatever the start-up took.  Defaults
keep the paper's two ratios (docs/design.md#quick-regime): compute is paced to the device profile's time
(``--profile``, default quick-cpu: 0.28 s), trace time is scaled by compute_s / 1.12 s (a sample
lasts half an iteration), and rates are scaled so the full 1-bit push takes ``--regime-ratio``
(0.3) of compute time at the trace's mean rate.  ``--time-scale`` / ``--rate-scale`` replace the
derived scales (the shared traces are already at the artifact's replayed 0.7x; the raw records are
not: ``--rate-scale 0.7`` replays them as the artifact did, without the regime).  Every choice and
the ratios reached are in ``config.yaml`` (``regime``).

Workload (``--workload``, :mod:`rog.workloads.registry`, recorded in ``config.yaml`` so every child
and ``scripts/test_checkpoints.py`` rebuild the same one): ``quick`` (default;
:class:`rog.workloads.QuickWorkload`: the quick ConvMLP pre-trained on clean digits, adapted on noisy
non-IID worker shards) or ``cruda`` (the paper's: ConvMLP-M at 224 px on noisy Fed-CIFAR100 HDF5 from
``--data-dir``, batch from the device profile, default ``jetson-xavier-nx``: 24; learning rate 1e-6;
pre-trained weights from ``--weights`` or ``<data-dir>/convmlp_m_cifar100.pth``, refused when
missing unless ``--random-init``; ``scripts/smoke_full.py`` runs it on generated data).  Flags follow the original artifact
(``--library``, ``--threshold``, ``-b/--batchsize`` as a multiple of the base batch, done as gradient
accumulation with compute paced to ``b`` times the profile's time while the links keep the x1
regime, ``-e/--epoch``, ``-n/--note``, ``-c/--control``).

``--library DDP`` (:mod:`rog.baselines.ddp`): the reference a user would otherwise pick, plain
``DistributedDataParallel`` over gloo with float32 gradients all-reduced every iteration (same
workload, split, seeds, SGD rule and rate as the ROG workers; ``--compression`` only sets the
regime's rate scale, so the links are those of a BSP run).  The PS process hosts the rendezvous
only; on the emulated testbed it forwards between the worker links, so the ring crosses every
shaped link like a hotspot (:mod:`rog.baselines.netpath`).  On loopback it runs unshaped only.

Writes ``<result-dir>/<run-id>/``: ``config.yaml`` (the resolved config), ``events-ps.jsonl`` and
``events-w<k>.jsonl`` (:mod:`rog.runtime.events`), ``metrics.csv`` (worker 0 tests the model it
holds at iteration 0, every ``--eval-every`` iterations and at the end; after the final flush it
tests once more, reported as ``flushed_accuracy``), replay logs ``replay-w<k>-up.csv`` /
``replay-w<k>-down.csv`` (``t_s`` on the event clock), ``tracking.json`` (does communication time
follow the replayed rate: :mod:`rog.experiment.tracking`), ``energy.json`` and ``power-<rank>.csv``
(the state model per device, labelled ``model:<profile>``), ``checkpoints/`` (:mod:`rog.checkpoint`:
the model each ``--checkpoint-workers`` worker holds at iteration 0, every ``--checkpoint-every-s``
seconds times the trace time scale, the period tripling after every ``--checkpoint-triple-every``
checkpoints, and at the last iteration; ``scripts/test_checkpoints.py`` tests them), ``manifest.json`` (code version, hosts,
trace checksum, command line, start/end, exit status), per-process logs, and ``DONE`` on success
or ``INCOMPLETE`` (with the reason) on failure, Ctrl-C or SIGTERM; partial results are kept and
every child process is killed on exit.  The run ends with one sentence on stderr (run id, status,
iterations, training time, the folder) and, with ``--json`` or when stdout is a pipe or a file, the JSON summary
as the last line of stdout (also in ``DONE``).  The progress bar names the start-up phase until the first
iteration, then shows s/it and ETA from training iterations only (at most two redraws a second).
``tb/`` holds TensorBoard scalars written as the run goes (``tensorboard --logdir result``; ``--no-tensorboard``).

Processes (``--launcher local``): the launcher (no torch after configuration), the parameter server
(no torch), and a worker host that builds the workload once (pre-training, layout) and starts one
fresh interpreter per worker (``--child local-worker``; never ``fork``: a forked child of a process that
used torch dies on its first backward with a CUDA build of torch); the links start when every worker
has imported torch and built its data (``w<k>.ready`` -> ``workers.ready``).  ``--device auto|cpu|cuda|cuda:N``
(default ``auto``: the GPU when one is present) picks where workers train; the device used is printed
and recorded in ``config.yaml`` (docs/gpu.md).  With ``--launcher
fabric`` every worker is its own process importing torch (as on real devices), so the ready gate
above keeps the links from starting before the slowest worker is ready.

``--config result/<run-id>/config.yaml`` reruns a recorded run: ``config.yaml`` keeps every flag's value
under ``flags`` (:mod:`rog.experiment.rerun`); those replace the defaults and any flag given beside
``--config`` overrides its recorded value (docs/reproduction.md#rerunning-a-recorded-run).
``python -m rog.experiment`` is the same command (how the launcher starts every child process).

The shared secret is generated per run and reaches the children only through their environment
(``ROG_SECRET``).  ``--serve-only`` starts just the parameter server on loopback (secret from your
``ROG_SECRET``) for workers you start yourself, e.g. ``examples/adapt_quick.py --server``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rog.experiment.cli import main  # the flags, their checks and the launch live in rog.experiment

if __name__ == "__main__":
    sys.exit(main(script=Path(__file__)))
