"""ROG: row-granulated synchronisation for distributed training over unstable wireless links.

The engine: rows (:mod:`rog.rows`), the codecs (:mod:`rog.codecs`), chunk planning and the
wire format (:mod:`rog.chunks`, :mod:`rog.wire`), synchronisation policies
(:mod:`rog.policies`) and an in-process simulator (:mod:`rog.sim`).
"""

__version__ = "0.1.0"
