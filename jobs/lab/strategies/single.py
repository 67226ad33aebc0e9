"""The single-device reference: the whole model, the whole batch, one process.

In a multi-rank run only rank 0 trains; the others wait. It is the baseline every
other strategy's speed is compared with (and the gate's reference is the same code).
"""

from __future__ import annotations

from jobs.lab.components.model import Batch, build_model
from jobs.lab.strategies.base import StepOut, Strategy


class SingleDevice(Strategy):
    name = "single"
    label = "single device (reference)"
    ranks_active = "rank0"

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        self.model = build_model(spec.cfg, ctx.device)
        self.opt = self.optimizer(list(self.model.parameters()))

    def train_step(self, batch: Batch) -> StepOut:
        return StepOut(self.one_step(batch.to(self.ctx.device)), 1.0)

    def micro_batches(self) -> int:
        return 1  # the whole batch at once

    def local_tokens(self) -> int:
        return self.spec.tokens

    def predicted_memory(self) -> dict:
        return self.peak_memory()
