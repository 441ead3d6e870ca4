"""ROG's evaluation items (MICRO 2022), the default plan of ``run_all.sh`` (docs/reproduction.md).

Registered in ``rog.paper_homes.PAPER_HOMES`` (``rog.experiment.items.PAPER_ITEMS``); the items are built with that module's ``RunSpec``
and ``Item``.  The end-to-end item's systems (:func:`e2e`) run in both replay modes; the ``recorded``
runs are their own item so that they can have the shorter budget (they are reported without targets).
The sensitivity items run BSP and ROG-4 per setting (artifact mode): the pair the acceptance bounds
compare (ROG-4's stall <= 0.6 x BSP's in every setting); adding SSP/FLOWN to every setting would double
the items' runs and not fit the 60-minute default next to the end-to-end item.
"""

from __future__ import annotations

from rog.paper_horizons import QUICK_E2E_BUDGET_S

__all__ = ["DEFAULT_ITEMS", "QUICK_BUDGETS_S", "e2e", "items"]

DEFAULT_ITEMS = ("outdoors", "recorded", "batch", "threshold", "workers")  # the default plan, in order
# the quick profile: the end-to-end item needs the longest budget; the others take the profile's own
QUICK_BUDGETS_S = (("outdoors", QUICK_E2E_BUDGET_S),)


def e2e(RunSpec, mode: str) -> list:
    """The end-to-end systems in replay mode ``mode``: BSP, SSP-4, SSP-20, FLOWN-4, ROG-4, ROG-20, DDP."""
    return [RunSpec("BSP", replay_mode=mode), RunSpec("SSP", 4, mode), RunSpec("SSP", 20, mode),
            RunSpec("FLOWN", 4, mode), RunSpec("ROG", 4, mode), RunSpec("ROG", 20, mode), RunSpec("DDP", replay_mode=mode)]


def items(RunSpec, Item) -> dict:
    """``{name: Item}`` of :data:`DEFAULT_ITEMS`, in order."""
    return {
        "outdoors": Item("outdoors", tuple(e2e(RunSpec, "artifact")),
                         "end to end: BSP, SSP-4, SSP-20, FLOWN-4, ROG-4, ROG-20 and DDP (gloo), artifact replay mode"),
        "recorded": Item("recorded", tuple(e2e(RunSpec, "recorded")),
                         "end to end with the record replayed as recorded (no holds): the same systems, no targets"),
        "batch": Item("batch", tuple(RunSpec(lib, th, batch_multiple=b) for b in (1, 2, 4) for lib, th in (("BSP", None), ("ROG", 4))),
                      "batch size x1/x2/x4 (gradient accumulation), BSP and ROG-4, artifact mode"),
        "threshold": Item("threshold", (RunSpec("BSP"),) + tuple(RunSpec("ROG", t) for t in (4, 20, 30, 40)),
                          "ROG staleness threshold 4/20/30/40 next to BSP, artifact mode"),
        "workers": Item("workers", tuple(RunSpec(lib, th, workers=w) for w in (4, 6, 8) for lib, th in (("BSP", None), ("ROG", 4))),
                        "4/6/8 workers (the original artifact left this out), BSP and ROG-4, artifact mode"),
    }
