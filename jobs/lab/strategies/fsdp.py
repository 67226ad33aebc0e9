"""PyTorch's FSDP2 (fully_shard): ZeRO-3, parameters sharded too, all-gathered per
block before its forward and again before its backward, gradients reduce-scattered.
One unit per block plus the root. Its collectives are PyTorch's own (not counted);
the prediction is 3*P*e bytes per step."""

from __future__ import annotations

from torch.distributed.fsdp import fully_shard

from jobs.lab import costmodel
from jobs.lab.model import Batch, build_model, loss_fn
from jobs.lab.strategies.base import StepOut, Strategy, sgd


class TorchFSDP2(Strategy):
    name = "fsdp2"
    label = "torch FSDP2 fully_shard (ZeRO-3)"
    builtin = True
    instrumented = False

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        mesh = ctx.mesh()
        self.model = build_model(spec.cfg, ctx.device)
        for blk in self.model.blocks.values():
            fully_shard(blk, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        self.opt = sgd(list(self.model.parameters()))

    def train_step(self, batch: Batch) -> StepOut:
        ctx, tl = self.ctx, self.ctx.timeline
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)
        self.opt.zero_grad(set_to_none=True)
        with tl.span("forward", mb=0):
            loss = loss_fn(self.spec.cfg.kind)(self.model(local.inputs), local.targets)
        with tl.span("backward", mb=0):
            loss.backward()
        with tl.span("optimizer"):
            self.opt.step()
        return StepOut(loss.detach(), 1.0 / ctx.world)

    def predicted_memory(self) -> dict[str, float]:
        return costmodel.memory_per_rank("fsdp2", self.spec.cfg.param_count(), d=self.ctx.world)

    def predicted_comm(self):
        return costmodel.fsdp_comm(self.spec.cfg.param_count(), 4, self.spec.cfg.layers + 1)

    def predict(self, cal: costmodel.Calibration) -> dict:
        flops = self.spec.flops(self.spec.tokens // self.ctx.world)
        return costmodel.predict_zero(flops, self.predicted_comm(), cal)
