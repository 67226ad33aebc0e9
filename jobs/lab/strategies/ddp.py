"""PyTorch's DistributedDataParallel, its all-reduces routed through the counting
wrapper by a comm hook (the same averaging as DDP's default hook)."""

from __future__ import annotations

from contextlib import nullcontext

from torch.nn.parallel import DistributedDataParallel as DDP

from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.predict import calibration, cost
from jobs.lab.strategies.base import StepOut, Strategy


class TorchDDP(Strategy):
    name = "ddp"
    label = "torch DistributedDataParallel"
    builtin = True
    name_prefix = "module."  # DDP wraps the model

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        model = build_model(spec.cfg, ctx.device)
        self.model = DDP(model, device_ids=[ctx.device] if ctx.is_cuda else None,
                         bucket_cap_mb=spec.bucket_cap_mb, process_group=ctx.group)
        self.model.register_comm_hook(None, self._allreduce_hook)
        self.opt = self.optimizer(list(self.model.parameters()))

    def _allreduce_hook(self, _state, bucket):
        # (no annotations: DDP compares them with dist.GradBucket and Future, and
        # postponed annotations would make it a string)
        buf = bucket.buffer()
        buf.div_(self.ctx.world)
        return self.ctx.comm.all_reduce_future(buf, bucket=bucket.index())

    def train_step(self, batch: Batch) -> StepOut:
        ctx, m, tl = self.ctx, self.spec.micro_batches, self.ctx.timeline
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)
        self.opt.zero_grad(set_to_none=True)
        total = 0.0  # a tensor after the first micro-batch: read after the step
        for i, mb in enumerate(local.split(m)):
            last = i == m - 1
            with (self.model.no_sync() if not last else nullcontext()):
                with tl.span("forward", mb=i):
                    loss = loss_fn(self.spec.cfg.kind)(self.model(mb.inputs), mb.targets) / m
                with tl.span("backward", mb=i):
                    loss.backward()
            total = total + loss.detach()
        with tl.span("optimizer"):
            self.opt.step()
        return StepOut(total, 1.0 / ctx.world)

    def replicated(self):
        return [(None, list(self.model.module.named_parameters()))]

    def predicted_memory(self) -> dict:
        # the reducer's flat buckets: a second copy of every gradient
        P = self.spec.cfg.param_count()
        return self.peak_memory(buffers={"DDP buckets": P * self.spec.e})

    def numels(self) -> list[int]:
        return [p.numel() for p in self.model.parameters()]

    def predicted_comm(self):
        return cost.dp_comm(self.numels(), self.spec.e, self.name, self.spec.cap_elems)

    def overlap_s(self, cal: calibration.Calibration, compute: list[dict]) -> float:
        last = cost.plan_buckets(self.numels(), self.spec.cap_elems)[-1]
        return self.backward_overlap(compute, cal.comm(self.predicted_comm()),
                                     cal.coll("all_reduce", last["numel"] * self.spec.e))
