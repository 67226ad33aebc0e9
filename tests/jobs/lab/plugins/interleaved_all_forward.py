"""An "interleaved 1F1B" that runs every chunk's forwards first and then every backward
(GPipe over the virtual stages): the same gradients, but v*m micro-batches in flight
instead of the warm-up's bound, and not the order its schedule promises."""

from jobs.lab import strategies
from jobs.lab.predict.schedule import backward_op, forward_op
from jobs.lab.strategies.interleaved import Interleaved1F1B


class AllForwardInInterleavedClothing(Interleaved1F1B):
    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        total = self.v * self.m
        self.steps = ([[("forward", *forward_op(k, self.p, self.v))] for k in range(total)]
                      + [[("backward", *backward_op(k, self.p, self.v))]
                         for k in range(total)])


strategies.register("interleaved_1f1b", AllForwardInInterleavedClothing)
