"""The single-device reference: the whole model, the whole batch, one process.

In a multi-rank run only rank 0 trains; the others wait. It is the baseline every
other strategy's speed is compared with (and the gate's reference is the same code).
"""

from __future__ import annotations

from jobs.lab.components.model import Batch, build_model, loss_fn
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
        b = batch.to(self.ctx.device)
        tl = self.ctx.timeline
        self.opt.zero_grad(set_to_none=True)
        with tl.span("forward", mb=0):
            loss = loss_fn(self.spec.cfg.kind)(self.model(b.inputs), b.targets)
        with tl.span("backward", mb=0):
            loss.backward()
        with tl.span("optimizer"):
            self.opt.step()
        return StepOut(loss.detach(), 1.0)

    def micro_batches(self) -> int:
        return 1  # the whole batch at once

    def local_tokens(self) -> int:
        return self.spec.tokens

    def predicted_memory(self) -> dict:
        return self.peak_memory()
