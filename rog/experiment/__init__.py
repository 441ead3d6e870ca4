"""Running one experiment on a testbed: what ``scripts/run.py`` does, beyond the engine.

The command (``scripts/run.py`` and ``python -m rog.experiment``, what every child process runs, are thin
entry points over these):

* :mod:`.cli`: the flags, their checks, ``main`` (a child mode, the ``--dry-run`` plan, or a run);
* :mod:`.sync_options`: the flags of per-worker compute speed (``--compute-ratios``) and ADSP's scheduler;
* :mod:`.config`: defaults, the resolved run configuration (``config.yaml``) and the run id;
* :mod:`.run_config`: :class:`~.run_config.RunConfig`, the typed run configuration every layer reads by
  attribute (one frozen section per concern; exactly ``config.yaml``);
* :mod:`.rerun`: ``--config``: the flags a run recorded in ``config.yaml``, read back (overridable);
* :mod:`.push_bytes`: the full push's frame bytes the regime scales to (cached; imports torch);
* :mod:`.rundir`: the run folder, its coordination file names and the atomic write / wait helpers;
* :mod:`.links`: each worker's replay schedule, the links' common start (``links.ready``), the budget;
* :mod:`.children`: the child processes (``--child ps|workers|worker|prepare``);
* :mod:`.worker_loop`: one worker's training loop (evaluation, checkpoints);
* :mod:`.supervise`: starting, watching and killing child processes, SIGTERM/SIGHUP handling;
* :mod:`.progress`: the live progress line from the growing event logs;
* :mod:`.launch`: which launcher runs the experiment; :mod:`.launch_local` (children started here)
  and :mod:`.launch_fabric` (deployed with :mod:`rog.deploy` over SSH: real devices, or the
  emulated testbed's namespaces);
* :mod:`.finalize`: ``metrics.csv``, the summary, ``tracking.json``, ``energy.json``,
  ``DONE``/``INCOMPLETE`` and ``manifest.json``.

What they build on:

* :mod:`.traceplan`: which trace a ``-c/--control`` setting replays, per-worker offsets and the
  quick regime (docs/design.md#quick-regime: keep transfer time / compute time and sample length / iteration);
* :mod:`.emulated`: the run's namespace testbed (run-specific prefix, replays, cleanup checks,
  entering a namespace from a freshly started worker) and the loopback fallback's trace-following shaping;
* :mod:`.tracking`: does communication time track the replayed bandwidth (the acceptance check);
* :mod:`.energy_report`: ``energy.json`` (and model power CSVs) per device, source named;
* :mod:`.manifest`: ``manifest.json`` (code version, hosts, trace checksums, command, times, status);
* :mod:`.items`: the evaluation items, their runs and the ``run_all.sh`` plan; each reproduced paper's own
  items live in its home ``rog.papers.<paper>`` and reach the plan through ``PAPER_ITEMS`` / ``MODULE_ITEMS``
  (module paths from ``rog.paper_homes``: this package never imports ``rog.papers``); :mod:`.module_item`: the
  one protocol of the items run by their own module;
* :mod:`.resume`: which complete run folders a plan skips (the planned ``config.yaml``, resolved by run.py's
  own code, compared entry by entry) and setting the others aside;
* :mod:`.global_loss`: the global model's loss that ADSP's scheduler at the PS reads (imports torch);
* :mod:`.config_upgrade`: ``config.yaml``'s earlier shapes and the one upgrader every reader uses (``version``).
"""

# What a run measures for the same flags depends on the code's semantics (how ``-b`` paces compute,
# the quick learning rate, the test set's noise draws, the chunk size as --chunk-share of the payload,
# ROG's speculative budget and mandatory prefix: then the ``atp`` entry of config.yaml, now ``policy_options``).
# run.py records this number in config.yaml and run_all.sh reruns a complete run recorded under another
# one.  Bump it with every change of what the same flags measure.
RUN_SEMANTICS = 4

