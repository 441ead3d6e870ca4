"""Running one experiment on a testbed: what ``scripts/run.py`` needs beyond the engine.

* :mod:`.traceplan`: which trace a ``-c/--control`` setting replays, per-worker offsets and the
  quick regime (DESIGN 3.3: keep transfer time / compute time and sample length / iteration);
* :mod:`.emulated`: the run's namespace testbed (run-specific prefix, replays, cleanup checks,
  entering a namespace from a freshly started worker) and the loopback fallback's trace-following shaping;
* :mod:`.tracking`: does communication time track the replayed bandwidth (the acceptance check);
* :mod:`.energy_report`: ``energy.json`` (and model power CSVs) per device, source named;
* :mod:`.manifest`: ``manifest.json`` (code version, hosts, trace checksums, command, times, status).
"""

# What a run measures for the same flags changes with the code now and then (session 3: ``-b`` paces
# compute to b x the profile; quick lr 5e-5; 4-draw test set; session 7: chunks of --chunk-share of the
# payload instead of 32 KB).  run.py records this number in config.yaml and run_all.sh reruns a complete
# run recorded under another one.  Bump it with such changes.
RUN_SEMANTICS = 3

