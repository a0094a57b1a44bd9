"""Stage 3 (continued), operator splitting: operators too large for the chip as sub-operators.

The stage between lowering (:mod:`tvm_icca.lower`) and planning (:mod:`tvm_icca.model_pass`):
an operator whose tensors cannot all be on the chip at once is cut along one axis into
sub-operators that each fit, reading their blocks of HBM tensors in place, with exact
combine operators where the cut runs along a reduction (:mod:`.pieces`); readers of the
pieces are cut the same way so that a chain is joined only once (:mod:`.region_split`); the axis
and the number of pieces are chosen with the plan search's cost model (:mod:`.split_choice`);
a decision for one layer's operator holds for its twins in the other layers (:mod:`.twins`).
The pieces are ordinary operators: the Elk pass schedules and preloads them like any other,
and both executors run them.
"""

from tvm_icca.split.split_choice import PIECE_FILL, best_split, choose_splits, needs_split, pressure_root
from tvm_icca.split.region_split import SplitChoice, is_join, original_operator, split_region
from tvm_icca.split.twins import twin_groups

__all__ = ["PIECE_FILL", "SplitChoice", "best_split", "choose_splits", "is_join", "needs_split",
           "original_operator", "pressure_root", "split_region", "twin_groups"]
