"""Intra-DP: distributed inference between a robot and a GPU server over the same unstable links.

Modules: :mod:`models` (VGG/ResNet/DenseNet-style classifiers), :mod:`graph` (capture along the
height, local/global operators, halos), :mod:`split` (split executor), :mod:`costmodel` (LOSS:
two compute clocks, one FIFO link per direction), :mod:`profiler` (per-unit times per side),
:mod:`planners` (local, all, layer-latency, layer-energy-deadline, intra-dp, intra-dp-loss,
intra-dp-de; plan tables over a bandwidth grid), :mod:`loss` (the paper's per-layer plan space: flows,
timeline, steps, search), :mod:`loss_de` (the paper's solver for it: differential
evolution), :mod:`live` (robot and server processes on a replayed netns link), :mod:`live_loss`
(per-layer plans on them).
"""

MODEL_NAMES = ("vgg19", "resnet18", "densenet")  # :data:`models.MODELS`' names, torch-free (the command's flags)
