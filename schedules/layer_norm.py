"""Layer normalization on one core: mean and variance of a whole row held locally.

Like softmax, the normalized axes are core-local; gamma and beta are read along them.
"""

from schedules.base import LocalReductionTemplate


class LayerNormTemplate(LocalReductionTemplate):
    kind = "layer_norm"
