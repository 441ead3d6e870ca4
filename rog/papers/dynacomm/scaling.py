"""DynaComm's rules 2 and 3 (docs/dynacomm.md, "Rule 2's c_paper and rule 3's ratio"): the per-transfer delay scaled
with the stand-in's compute, and a calibration ratio not taken from the paper's own result.

* :func:`paper_layer_forward_s`: the paper's per-layer forward compute ``c_paper``.  The paper prints no absolute
  time (its Figs. 6 and 7 are normalised), so it is estimated from its stated setting: batch 32 at 224 x 224 on a
  4-core Xeon E3-1220 at 3.00 GHz (AVX2, two FMA units: 32 FP32 operations per cycle and core), at
  :data:`EFFICIENCY` of that peak, over the model's layers by the paper's grouping (:data:`PAPER_LAYERS`);
* :func:`scaled_delay_ms`: ``d_ours = d_paper x c_ours / c_paper`` with ``c_ours`` the unshaped calibration's
  forward compute over the stand-in's layers (:data:`rog.papers.dynacomm.nulls.MODEL_LAYERS`);
* :data:`JETSON_RATIO`: the Jetson Xavier NX worker's communication over compute per BSP iteration in the ROG
  artifact's outdoor logs (5.14 s / 1.11 s; the artifact figures quoted in ``rog/papers/rog/references.py``);
* :func:`argument_holds`: the scaling is argued only when the plans' measured per-transfer cost lies within
  :data:`ARGUMENT_FACTOR` of ``d_ours`` (the efficiency band's factor); the transport's own cost may exceed it.
"""

from __future__ import annotations

from typing import Mapping

from .nulls import MODEL_LAYERS

__all__ = ["PAPER_DELAY_MS", "CPU_PEAK_FLOPS", "EFFICIENCY", "EFFICIENCY_BAND", "PAPER_BATCH", "PAPER_FORWARD_MACS",
           "PAPER_LAYERS", "STAND_IN", "PAPER_LAYER_FORWARD_MS", "JETSON_COMM_S", "JETSON_COMPUTE_S", "JETSON_RATIO",
           "ARGUMENT_FACTOR", "SETTINGS", "paper_layer_forward_s", "our_layer_forward_s", "scaled_delay_ms",
           "setting_ratio_and_delay", "argument_holds", "scaling_argument"]

PAPER_DELAY_MS = 10.0  # the paper's edge-cloud round trip (Section V-A, Fig. 5), the item's 10 ms per transfer
CPU_PEAK_FLOPS = 4 * 3.0e9 * 32  # 4 cores x 3.00 GHz x 32 FP32 operations per cycle (AVX2, 2 FMA units): 384e9
EFFICIENCY = 0.5  # of peak over the whole forward pass (fixed before any run; docs/dynacomm.md)
EFFICIENCY_BAND = (0.25, 1.0)  # the estimate's band; 1.0 is a hard bound
PAPER_BATCH = 32  # Section V-A: batch 32, ILSVRC12 at 224 x 224
PAPER_FORWARD_MACS = {"VGG-19": 19.6e9, "ResNet-152": 11.3e9}  # multiply-adds per image (VGG paper; He et al., Table 1)
PAPER_LAYERS = {"VGG-19": 19, "ResNet-152": 152}  # weight layers; ResNet's projection shortcuts merge with their block
STAND_IN = {"vgg_mini": "VGG-19", "resnet152_mini": "ResNet-152"}  # the stand-in of the same depth class
JETSON_COMM_S, JETSON_COMPUTE_S = 5.14, 1.11  # BSP, one Jetson worker of 4, the artifact's outdoor logs
JETSON_RATIO = JETSON_COMM_S / JETSON_COMPUTE_S  # 4.63
ARGUMENT_FACTOR = EFFICIENCY_BAND[1] / EFFICIENCY  # 2: the measured per-transfer cost within 2x of d_ours
# the dynacomm-scaled item's settings: name -> (communication-to-compute ratio, delay in ms or "scaled")
SETTINGS: dict[str, tuple[float, float | str]] = {
    "r1-d10": (1.0, PAPER_DELAY_MS),  # the dynacomm item's own setting (ratio from the paper's 41 %), beside
    "r1-scaled": (1.0, "scaled"),
    "jetson-scaled": (JETSON_RATIO, "scaled"),
}


def paper_layer_forward_s(paper_model: str, efficiency: float = EFFICIENCY) -> float:
    """``c_paper``: the paper's forward compute per layer in seconds (batch x 2 x multiply-adds / (peak x efficiency)
    / layers)."""
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
    flops = PAPER_BATCH * 2.0 * PAPER_FORWARD_MACS[paper_model]
    return flops / (CPU_PEAK_FLOPS * efficiency) / PAPER_LAYERS[paper_model]


PAPER_LAYER_FORWARD_MS = {m: 1e3 * paper_layer_forward_s(m) for m in PAPER_LAYERS}  # 343.9 and 24.78 ms


def our_layer_forward_s(cal: Mapping, model: str) -> float:
    """``c_ours``: the unshaped Sequential calibration's mean forward compute over the stand-in's layers."""
    fwd = float(cal["mean_fwd_compute_s"])
    if fwd <= 0:
        raise ValueError(f"{model}: the calibration's forward compute must be positive, got {fwd}")
    return fwd / MODEL_LAYERS[model]


def scaled_delay_ms(cal: Mapping, model: str) -> float:
    """``d_ours = d_paper x c_ours / c_paper`` in ms, for a stand-in of :data:`STAND_IN`."""
    return PAPER_DELAY_MS * our_layer_forward_s(cal, model) / paper_layer_forward_s(STAND_IN[model])


def setting_ratio_and_delay(setting: str, cal: Mapping, model: str) -> tuple[float, float]:
    """``(ratio, delay ms)`` of one of :data:`SETTINGS` on ``model`` (a scaled delay from its calibration)."""
    ratio, delay = SETTINGS[setting]
    return ratio, (scaled_delay_ms(cal, model) if delay == "scaled" else float(delay))


def argument_holds(d_ours_ms: float, dt_measured_ms: float | None) -> bool:
    """The scaled delay was reached: the plans' measured per-transfer cost within :data:`ARGUMENT_FACTOR` of it."""
    if dt_measured_ms is None or d_ours_ms <= 0:
        return False
    return d_ours_ms / ARGUMENT_FACTOR <= dt_measured_ms <= d_ours_ms * ARGUMENT_FACTOR


def scaling_argument(model: str, d_ours_ms: float, dt_measured_ms: float | None) -> str:
    """The argument a scaled-delay row carries ('' when the measured per-transfer cost missed ``d_ours``)."""
    if not argument_holds(d_ours_ms, dt_measured_ms):
        return ""
    paper = STAND_IN[model]
    return (f"per-transfer delay scaled with the per-layer forward compute: {PAPER_DELAY_MS:g} ms x c_ours / c_paper "
            f"({paper}: {PAPER_LAYER_FORWARD_MS[paper]:.2f} ms per layer, estimated from the paper's CPU at "
            f"{EFFICIENCY:.0%} of peak) = {d_ours_ms:.3f} ms; the plans measured {dt_measured_ms:.3f} ms per transfer"
            + (" (below the delay the transport adds to every transfer: the plans' fitted estimate, not a transfer's "
               "cost; the argument holds by the rule, with that caveat)" if dt_measured_ms < d_ours_ms else ""))
