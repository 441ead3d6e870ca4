"""``compare`` (opt-in): every training system on the same links, and the combinations that compose.

The ``outdoors`` item's setting for every run (the replayed outdoor traces in artifact mode, the quick
workload, 4 workers, the seed, the 150 s budget): BSP, SSP-4, FLOWN-4, ROG-4, ADSP (online search),
Fixed ADACOMM-40, DynaComm under BSP, ScaDLES (BSP with S1 streams, rate-proportional batches, weighted
aggregation, truncated buffers and the gated Top-k codec), and DDP as the reference; then the
combinations (:data:`COMBINATIONS`), marked as such.  Every system but DDP runs under ``--pacing layer``
(each layer's measured share of the profile's compute time), the one pacing the segmented schedules
can run under; DDP paces inside its own runtime (``--pacing layer`` refuses it), so its run is the
``outdoors`` item's very run.

Each system's setting and its source are in docs/compare.md; the combinations that do not compose
through the existing interfaces (ROG with DynaComm's segment schedule, ROG with ADSP's commit timer)
are left out there with the reason (:data:`LEFT_OUT`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rog.codecs.codecs_topk import TopKCodec
from rog.options import OptionValues, flag_text, option_values
from rog.paper_horizons import QUICK_E2E_BUDGET_S
from rog.policies.adsp import ADSP
from rog.policies.registry import has_own_runtime
from rog.streams import options as streams

COMPARE_ITEM = "compare"
QUICK_BUDGETS_S = ((COMPARE_ITEM, QUICK_E2E_BUDGET_S),)  # the outdoors item's budget (rog.experiment.items.PAPER_ITEMS)
TAG = "cmp"  # run.py -n: these runs differ from the outdoors item's by --pacing layer
LAYER_PACING = (("pacing", "layer"),)  # every run's run.py setting but DDP's (RunSpec.settings)
ADSP_TIME_SCALE = 0.28  # the quick profile's compute time per iteration over the paper's assumed 1 s (rog.papers.adsp.item)
TOPK = (("compression", "topk"),)
TOPK_GATED = option_values(TopKCodec, ratio=0.1, gate=True, delta=0.3)
SCADLES_STREAMS = option_values((streams.Options, streams.FLAG_PREFIX), set="S1", buffer="truncate",
                                batch_policy="rate_proportional", weighted_aggregation=True, lr_scaling="linear")


@dataclass(frozen=True)
class Entry:
    """One planned system of the item: ``key`` (its run's tag suffix), run.py library and threshold, its run.py
    settings and mechanisms' options beyond the item's, whether it is a combination, and the source of its setting."""

    key: str
    library: str
    threshold: int | None
    settings: tuple[tuple[str, Any], ...]  # RunSpec.settings' fields (the item adds --pacing layer)
    options: tuple[OptionValues, ...]  # RunSpec.options
    combination: bool
    source: str

    def argv(self) -> list[str]:
        """Its run.py flags beyond the item's (what docs/compare.md lists)."""
        return [a for k, v in self.settings for a in ("--" + k.replace("_", "-"), flag_text(v))] + [
            a for o in self.options for a in o.argv()]


SYSTEMS: tuple[Entry, ...] = (
    Entry("bsp", "BSP", None, (), (), False, "ROG paper Sec. VI (baseline)"),
    Entry("ssp4", "SSP", 4, (), (), False, "ROG paper Sec. VI (threshold 4, as the outdoors item)"),
    Entry("flown4", "FLOWN", 4, (), (), False, "ROG paper Sec. VI (threshold 4, as the outdoors item)"),
    Entry("rog4", "ROG", 4, (), (), False, "ROG paper Sec. VI (threshold 4, as the outdoors item)"),
    Entry("adsp", "ADSP", None, (), (option_values(ADSP, time_scale=ADSP_TIME_SCALE, loss_every_s=1.0),), False,
          "ADSP paper Sec. 5.1 (Gamma 60 s, epoch 20 min) and Sec. 4.2 (window 1 min), times x 0.28"),
    Entry("adacomm40", "ADACOMM", 40, (), (), False, "ADSP paper Sec. 5 baseline Fixed ADACOMM, tau 40 (ADSP authors' code)"),
    Entry("dynacomm", "BSP", None, (("schedule", "dynacomm"),), (), False,
          "DynaComm Sec. IV-B (DP schedules, Algs. 3 and 4) and IV-C (re-planned once per epoch)"),
    Entry("scadles", "BSP", None, TOPK, (SCADLES_STREAMS, TOPK_GATED), False,
          "ScaDLES Sec. V-D (weighted aggregation), V-E (truncation), V-H (CR 0.1, delta 0.3)"),
    Entry("ddp", "DDP", None, (), (), False, "reference: torch DDP over gloo (the outdoors item's run)"),
)
COMBINATIONS: tuple[Entry, ...] = (
    Entry("rog4-topk", "ROG", 4, TOPK, (TOPK_GATED,), True,
          "ROG-4 (ROG Sec. VI) with ScaDLES's gated Top-k (Sec. V-H) as its codec"),
)
# combinations the issue names that do not compose through the existing interfaces (docs/compare.md says why)
LEFT_OUT = {
    "ROG-4 + DynaComm segment schedule": "--schedule takes whole-model systems only (Policy.segmented_schedules: "
                                         "BSP, SSP); ROG's push is one deadline-cut, importance-ordered row prefix",
    "ROG-4 + ADSP commit timer": "the commit timer is ADSP's own policy (commit_due, schedule, commit_control); "
                                 "a run has one policy (--library), ROG's or ADSP's",
}


def entries() -> tuple[Entry, ...]:
    """Every planned run of the item, systems first, then combinations."""
    return SYSTEMS + COMBINATIONS


def items(spec_cls, item_cls) -> dict:
    """``{"compare": Item}`` built with items.py's classes (``RunSpec``, ``Item``); artifact replay mode,
    4 workers, ``outdoors`` control, as the outdoors item."""
    runs = []
    for e in entries():
        if has_own_runtime(e.library):  # DDP paces in its own runtime: the outdoors item's run, shared
            runs.append(spec_cls(e.library))
            continue
        runs.append(spec_cls(e.library, e.threshold, settings=spec_cls.Settings(**dict(LAYER_PACING + e.settings)),
                             options=e.options, tag=f"{TAG}-{e.key}"))
    about = ("every training system on the outdoors item's links, workload, workers, seeds and budget, --pacing layer: "
             "BSP, SSP-4, FLOWN-4, ROG-4, ADSP, ADACOMM-40, DynaComm (BSP), ScaDLES (BSP), DDP; combination ROG-4 + gated Top-k")
    return {COMPARE_ITEM: item_cls(COMPARE_ITEM, tuple(runs), about)}
