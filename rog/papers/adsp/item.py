"""The evaluation items of ADSP's own claims (Hu, Wang, Wu, AAAI 2020), at a scale this machine holds.

``adsp`` (budget :data:`ADSP_BUDGET_S` per run, 3 workers, quick workload):

* Fig. 1 / Fig. 4 at this scale (tag ``fig1``, seeds :data:`SEEDS`): compute paced to 1:1:3
  (:data:`COMPUTE_S` per mini-batch on the two fast workers, three times that on the slow one),
  unshaped links (the paper's EC2 workers in one region); BSP, SSP-40, Fixed ADACOMM-40 (tau 40) and
  ADSP with its online search; time breakdown per system, and the time to a common target loss of
  the global model.

The ``fig1`` runs train :data:`MODEL` from scratch (the paper trains its CIFAR-10 CNN from scratch;
GroupNorm, so the PS's global model needs no batch statistics) on IID shards (the paper's workers
draw from one CIFAR-10; the quick workload's default label-sorted shards left a from-scratch model at
chance for 60 s).  The Fig. 3a runs keep the quick
workload's pre-trained ConvMLP, whose 1-bit commit costs about half a second at the shaped rate (the
from-scratch CNN has 9x fewer parameters, so its commits would cost almost nothing and the U's right
arm would vanish).  In every run the PS evaluates the global model every :data:`GLOBAL_EVAL_EVERY_S`
of run time (``--global-eval-every-s``: one grid for every system).
* Fig. 3a (tags ``ushape-k<K>``, ``ushape-search``): ADSP with the commit rate fixed at
  :data:`USHAPE_RATES` commits per check period and with the online search (seeds 0, 1, 2: each search is
  judged against its own seed's grid),
  on links shaped to :data:`USHAPE_RATE_MBIT` Mbit/s so that a commit costs time (a round trip of the
  quick model's 1-bit push and pull is about half a second, five fast mini-batches: the cost that
  makes the paper's U), and a minimum commit interval of one fast mini-batch so the grid's high rates
  are reachable.

``adsp_outdoors``: ADSP (online search) in the outdoors setting beside the ``outdoors`` item's ROG,
SSP and BSP (4 workers, replayed outdoors traces, artifact mode, the quick profile's compute).

``adsp_fig56`` (Figs. 5 and 6 at the ``fig1`` runs' scale, seeds :data:`SEEDS`, ordered by seed):

* Fig. 5 (tags ``fig5-h<H>``): ADSP and Fixed ADACOMM-40 at the heterogeneity degrees :data:`FIG5_H`,
  compute paced by :func:`fig5_ratios` (two fast workers and one slow, the same total speed at every H).
* Fig. 6 (tags ``fig6-d<ms>``): BSP, SSP-40, Fixed ADACOMM-40, adaptive ADACOMM and ADSP at 1:1:3 with an
  extra per-transfer delay of :data:`FIG6_DELAYS_MS` ms (``--link-delay-ms``, emulated in the transport;
  not scaled).  At 0 ms the four systems of ``fig1`` are those very runs (one run serves both items).

``adsp_fig6_fresh``: Fig. 6's 15 runs for each of :data:`FIG6_FRESH_SEEDS` (no ``fig1`` run of those seeds
exists, so the 0 ms runs are tagged ``fig6-d0``), judged under the target rule docs/adsp.md wrote before them.
``adsp_fig6_guard``: the same 15 runs for each of :data:`FIG6_GUARD_SEEDS`, judged with the depth guard's noise
measured between commits (rule written on 6 Dec 2026 before any of these runs).

Time scaling: every ADSP time (check period Gamma 60 s, search epoch 20 min, window 1 min, code's
10 s minimum interval) is multiplied by this run's compute time per mini-batch over an assumed
1 s per mini-batch in the paper's testbed (the paper does not state it): x :data:`ADSP_TIME_SCALE`
in ``adsp`` (Gamma 6 s = 60 fast mini-batches), x :data:`OUTDOORS_TIME_SCALE` in ``adsp_outdoors``.
"""

from __future__ import annotations

from rog.options import option_values
from rog.paper_horizons import QUICK_E2E_BUDGET_S
from rog.policies.adsp import ADSP

ADSP_BUDGET_S = 60.0  # wall-clock budget of every adsp run
# the quick profile's budget of each item (rog.experiment.items.PAPER_ITEMS): adsp_outdoors beside the outdoors item's runs
QUICK_BUDGETS_S = (("adsp", ADSP_BUDGET_S), ("adsp_outdoors", QUICK_E2E_BUDGET_S), ("adsp_fig56", ADSP_BUDGET_S),
                   ("adsp_fig6_fresh", ADSP_BUDGET_S), ("adsp_fig6_guard", ADSP_BUDGET_S))
COMPUTE_S = 0.1  # paced compute per mini-batch of the fast workers (the slow one: x 3)
PAPER_MINIBATCH_S = 1.0  # assumption: the paper's mini-batch time (not stated there)
ADSP_TIME_SCALE = COMPUTE_S / PAPER_MINIBATCH_S
OUTDOORS_TIME_SCALE = 0.28 / PAPER_MINIBATCH_S  # the quick profile's compute time per iteration
RATIOS = (1.0, 1.0, 3.0)  # Fig. 1 / Fig. 3a: time to train one mini-batch 1:1:3
USHAPE_RATES = (1, 2, 4, 8, 16)  # fixed commit rates (commits per check period), a geometric grid
USHAPE_RATE_MBIT = 1.0  # link rate of the U-shape runs, each direction
USHAPE_FLOOR_S = COMPUTE_S / ADSP_TIME_SCALE  # before scaling: x ADSP_TIME_SCALE = one fast mini-batch
GLOBAL_EVAL_EVERY_S = 1.0  # the PS evaluates the global model this often, every system (seconds)
MODEL = "cnn_gn_quick"  # trained from scratch
SEEDS = (0, 1, 2)  # every figure
SEARCH_SEEDS = SEEDS
FIG6_FRESH_SEEDS = (3, 4, 5)  # Fig. 6 under the target rule written after seeds 0-2 had been seen (docs/adsp.md)
FIG6_GUARD_SEEDS = (6, 7, 8)  # Fig. 6 with the between-commits depth guard (docs/adsp.md, written before their runs)
FIG5_H = (1.0, 1.6, 2.4, 3.2)  # heterogeneity degrees H = mean_i(v_i) / min_i(v_i) (the paper's Fig. 5e)
FIG5_SYSTEMS = (("ADSP", None), ("ADACOMM", 40))  # the two systems the paper's Fig. 5 compares
FIG6_DELAYS_MS = (0, 100, 500)  # extra delay per transfer, ms (unscaled: docs/adsp.md says why)
FIG6_SYSTEMS = (("BSP", None), ("SSP", 40), ("ADACOMM", 40), ("ADAPTIVE_ADACOMM", 40), ("ADSP", None))


def slow_ratio(h: float) -> float:
    """Slow/fast mini-batch time ratio r of two fast workers and one slow with heterogeneity degree ``h``:
    H = ((2a + a/r) / 3) / (a/r) = (2r + 1) / 3, so r = (3H - 1) / 2."""
    if not h >= 1:
        raise ValueError(f"a heterogeneity degree is >= 1, got {h!r}")
    return (3.0 * h - 1.0) / 2.0


def fig5_ratios(h: float) -> tuple[float, float, float]:
    """``--compute-ratios`` (x :data:`COMPUTE_S`) for degree ``h``: fast speed 3r / (2r + 1), so the total speed
    is the same at every H; the time unit makes the sweep's fastest mini-batch (at max :data:`FIG5_H`) COMPUTE_S."""
    unit = slow_ratio(max(FIG5_H)) / max(FIG5_H)
    r = slow_ratio(h)
    fast = unit * h / r
    return (fast, fast, fast * r)


def _adsp(scale: float, **values):
    """ADSP's options at time scale ``scale`` (the flags' values, before the scale: rog.options.option_values)."""
    return option_values(ADSP, time_scale=scale, **values)


def items(RunSpec, Item) -> dict:
    """``{"adsp": Item, "adsp_outdoors": Item, "adsp_fig56": Item, "adsp_fig6_fresh": Item, "adsp_fig6_guard": Item}``
    (built with items.py's classes: ``RunSpec.Settings`` is its run.py settings)."""
    RunSettings = RunSpec.Settings

    def paced(ratios: tuple[float, ...], **more) -> RunSettings:
        """Paced compute at ``ratios``, the global model tested every second, and ``more``."""
        return RunSettings(compute_s=COMPUTE_S, compute_ratios=ratios, global_eval_every_s=GLOBAL_EVAL_EVERY_S, **more)

    def scratch(ratios: tuple[float, ...] = RATIOS, **more) -> RunSettings:
        """:func:`paced`, the model trained from scratch on IID shards."""
        return paced(ratios, quick_model=MODEL, partition="iid", **more)

    def adsp(lib: str, **values) -> tuple:
        """ADSP's options for ADSP's runs (none for the other systems)."""
        return (_adsp(ADSP_TIME_SCALE, **values),) if lib == "ADSP" else ()

    fig1 = [RunSpec(lib, th, workers=3, control="none", seed=s, settings=scratch(), options=adsp(lib), tag="fig1")
            for s in SEEDS for lib, th in (("BSP", None), ("SSP", 40), ("ADACOMM", 40), ("ADSP", None))]
    link = paced(RATIOS, rate_mbit=USHAPE_RATE_MBIT)
    grid = [RunSpec("ADSP", workers=3, control="none", seed=s, settings=link,
                    options=adsp("ADSP", floor_s=USHAPE_FLOOR_S, fixed_rate=k), tag=f"ushape-k{k}")
            for s in SEEDS for k in USHAPE_RATES]
    search = [RunSpec("ADSP", workers=3, control="none", seed=s, settings=link,
                      options=adsp("ADSP", floor_s=USHAPE_FLOOR_S), tag="ushape-search") for s in SEARCH_SEEDS]

    def fig6_runs(s: int, shared_runs: list) -> list:
        """Fig. 6's runs of seed ``s``: every delay and system; a 0 ms run found in ``shared_runs`` is reused."""
        out = []
        for ms in FIG6_DELAYS_MS:
            for lib, th in FIG6_SYSTEMS:
                shared = [r for r in shared_runs if r.seed == s and r.library == lib] if ms == 0 else []
                out += shared or [RunSpec(lib, th, workers=3, control="none", seed=s, tag=f"fig6-d{ms}",
                                          settings=scratch(link_delay_ms=float(ms)), options=adsp(lib))]
        return out

    outdoors = [RunSpec("ADSP", options=(_adsp(OUTDOORS_TIME_SCALE, loss_every_s=1.0),))]
    fig56 = []
    for s in SEEDS:  # seed by seed: a partial run of the item still gives whole seeds
        for h in FIG5_H:
            ratios = tuple(float(f"{x:.4g}") for x in fig5_ratios(h))
            fig56 += [RunSpec(lib, th, workers=3, control="none", seed=s, settings=scratch(ratios), options=adsp(lib),
                              tag=f"fig5-h{h:g}") for lib, th in FIG5_SYSTEMS]
        fig56 += fig6_runs(s, fig1)
    return {
        "adsp": Item("adsp", tuple(fig1 + grid + search),
                     "ADSP's own claims: Fig. 1 time breakdown and Fig. 4's time to the global model's target loss "
                     "(BSP, SSP-40, ADACOMM-40, ADSP at 1:1:3, 3 seeds) and Fig. 3a's U-shape (fixed commit rates, "
                     "online search, 3 seeds)"),
        "adsp_outdoors": Item("adsp_outdoors", tuple(outdoors),
                              "ADSP on the replayed outdoors traces, next to the outdoors item's ROG, SSP and BSP"),
        "adsp_fig56": Item("adsp_fig56", tuple(fig56),
                           "ADSP's Fig. 5 (ADSP vs Fixed ADACOMM-40 at heterogeneity H = 1, 1.6, 2.4, 3.2) and Fig. 6 (BSP, "
                           "SSP-40, Fixed ADACOMM-40, adaptive ADACOMM, ADSP with 0/100/500 ms per transfer), 3 seeds"),
        "adsp_fig6_fresh": Item("adsp_fig6_fresh", tuple(r for s in FIG6_FRESH_SEEDS for r in fig6_runs(s, [])),
                                "ADSP's Fig. 6 on fresh seeds 3-5 (BSP, SSP-40, Fixed ADACOMM-40, adaptive ADACOMM, ADSP "
                                "with 0/100/500 ms per transfer), judged under the target rule written before them"),
        "adsp_fig6_guard": Item("adsp_fig6_guard", tuple(r for s in FIG6_GUARD_SEEDS for r in fig6_runs(s, [])),
                                "ADSP's Fig. 6 on fresh seeds 6-8, judged with the depth guard's noise measured between "
                                "commits (rule written before their runs)"),
    }
