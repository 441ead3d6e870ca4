"""ROG: row-granulated synchronisation for distributed training over unstable wireless links.

The engine: rows (:mod:`rog.rows`), the codecs (:mod:`rog.codecs`), chunk planning and the
wire format (:mod:`rog.chunks`, :mod:`rog.wire`), synchronisation policies
(:mod:`rog.policies`) and an in-process simulator (:mod:`rog.sim`).  For an application: the drop-in
optimizer :class:`rog.optim.ROGOptimizer` and its server, ``rog.serve(model, workers=N, ...)``.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``rog.serve``: a parameter server for any model in one call (:func:`rog.serving.serve`), imported on first use."""
    if name == "serve":
        from .serving import serve

        return serve
    raise AttributeError(f"module 'rog' has no attribute {name!r}")
