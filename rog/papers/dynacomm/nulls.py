"""DynaComm's null model (docs/dynacomm.md, "Grades"): the L x delay term alone.

LBL sends every one of a model's L layers as its own transfer, each paying the per-transfer delay d (held on
every transmission's Begin).  With no overlap gain for any schedule (DynaComm's plan no better than one segment,
i.e. Sequential), what remains is LBL's serial ``L x d`` per direction:

* forward (the pulls): LBL's forward = Sequential's forward ``f`` + ``L d``; DynaComm's = ``f``; so DynaComm's lead
  over LBL in forward reduction is ``100 L d / f`` percentage points (:func:`forward_lead_pp`);
* iteration (a pull and a push per layer): LBL / Sequential = ``1 + 2 L d / T``, DynaComm / Sequential = 1, lead
  ``2 L d / T`` of Sequential's iteration ``T`` (:func:`iteration_lead`).
The same rules that judge the measurement judge these figures (:mod:`rog.papers.dynacomm.grading`).
"""

from __future__ import annotations

__all__ = ["MODEL_LAYERS", "forward_lead_pp", "iteration_lead"]

# DynaComm layers per stand-in model (docs/dynacomm.md, "Deep and branchy models"; LBL's segments per direction)
MODEL_LAYERS = {"vgg_mini": 9, "inception_mini": 11, "resnet_mini": 23, "resnet152_mini": 155}


def _check(layers: int, delay_s: float, base_s: float) -> None:
    if layers < 1 or delay_s < 0 or base_s <= 0:
        raise ValueError(f"need layers >= 1, delay >= 0 and a positive base time, got {layers}, {delay_s}, {base_s}")


def forward_lead_pp(layers: int, delay_s: float, seq_forward_s: float) -> float:
    """DynaComm's forward-reduction lead over LBL (percentage points) from ``L x d`` alone."""
    _check(layers, delay_s, seq_forward_s)
    return 100.0 * layers * delay_s / seq_forward_s


def iteration_lead(layers: int, delay_s: float, seq_iteration_s: float) -> float:
    """``(LBL - DynaComm) / Sequential`` of the iteration from ``L x d`` alone (a pull and a push per layer)."""
    _check(layers, delay_s, seq_iteration_s)
    return 2.0 * layers * delay_s / seq_iteration_s


def check_holds(layers: int, delay_s: float, seq_iteration_s: float, margin: float = 1.03) -> bool:
    """The check "DynaComm <= margin x the best of Sequential, LBL, iBatch" under the null: DynaComm and iBatch take
    Sequential's time ``T`` (no overlap gain), LBL ``T + 2 L d``."""
    _check(layers, delay_s, seq_iteration_s)
    t = seq_iteration_s
    return t <= margin * min(t, t + 2.0 * layers * delay_s, t)
