"""One package per reproduced paper, over the shared framework (docs/architecture.md, "Where each system lives").

Each home holds that paper's evaluation: its items (what runs), its summary section, verdict rules and
reference numbers with their sources, and its figures.  Mechanisms stay in the engine, grouped by kind
(``rog.policies``, ``rog.schedules``, the codecs, ``rog.streams``, ``rog.inference``); shared analysis
(loading runs, metrics, claim tables, figure helpers) stays in ``rog.analysis``.

* ``rog.papers.rog``: ROG (MICRO 2022): the default plan's items, ``outdoors_long``, its reference numbers,
  its summary section (claims, replicas, re-readings, efficiency, ATP, long horizon) and its figures;
* ``rog.papers.adsp``: ADSP (AAAI 2020);
* ``rog.papers.dynacomm``: DynaComm;
* ``rog.papers.scadles``: ScaDLES;
* ``rog.papers.intradp``: Intra-DP (inference);
* ``rog.papers.compare``: the bench's own cross-system comparison (every training system on the same links).

The experiment and analysis layers never import this package: they reach a paper through registries
of module paths, all derived from the one registry of homes (``rog.paper_homes.PAPER_HOMES``).
"""
