"""Strategies whose numbers are off by the same small factor everywhere - what bf16's
per-tensor tolerance cannot see, and the gate's loss and gradient-norm checks must:

- a 1F1B that divides each micro-batch's loss by m + 1 instead of m: its loss and every
  gradient are m/(m+1) of the reference's (AdamW's update hardly notices a scale);
- a bucketed data parallel that averages over 1.01 d ranks: every gradient 1% low, the
  loss right.

Loaded into the workers through COMMONPLACE_LAB_PLUGIN."""

from jobs.lab import strategies
from jobs.lab.strategies.data_parallel import DataParallelBucket
from jobs.lab.strategies.pipeline_parallel import OneFOneB


class LossOverMPlusOne(OneFOneB):
    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        right, m = self.loss, self.m
        self.loss = lambda y, targets: right(y, targets) * m / (m + 1)


class OnePercentLowGradients(DataParallelBucket):
    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        self.grads.d = ctx.world * 1.01


strategies.register("1f1b", LossOverMPlusOne)
strategies.register("dp_bucket", OnePercentLowGradients)
