"""Sum and mean along axes on one core's vector unit.

The reduced axes are top-level axes: splitting them across cores leaves partial sums in
several output replicas that are summed at the end (T10 §4.2; the final reduction of the
T10 benchmark cost model); mean divides in the fused epilogue.
"""

from schedules.base import ComputeTemplate


class ReduceTemplate(ComputeTemplate):
    kind = "reduce"
