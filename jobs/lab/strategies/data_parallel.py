"""Data parallelism by hand (picotron's DataParallelNaive / DataParallelBucket).

Every rank holds the whole model and 1/d of the batch; gradients are averaged with
all_reduce so every replica takes the same step. The naive version all-reduces each
gradient after backward; the bucketed one groups gradients into flat buckets and
starts a bucket's all_reduce from a post-accumulate-grad hook as soon as its last
gradient exists, overlapping communication with the rest of backward. With m
micro-batches the first m-1 backward passes skip the sync (``no_sync``).
"""

from __future__ import annotations

from typing import Any

import torch

from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.predict import calibration, cost
from jobs.lab.strategies.base import StepOut, Strategy


class DataParallelNaive(Strategy):
    name = "dp_naive"
    label = "data parallel, naive (all-reduce after backward)"

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        self.model = build_model(spec.cfg, ctx.device)
        self.opt = self.optimizer(list(self.model.parameters()))

    def syncing(self, on: bool) -> None:
        """no_sync: only the last micro-batch's backward may communicate (the bucketed
        strategy's hooks); the naive one sends everything after backward anyway."""

    def sync_gradients(self) -> None:
        for p in self.model.parameters():
            self.ctx.comm.all_reduce(p.grad)
            p.grad.div_(self.ctx.world)

    def train_step(self, batch: Batch) -> StepOut:
        ctx, m, tl = self.ctx, self.spec.micro_batches, self.ctx.timeline
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)  # (B/d, T)
        self.opt.zero_grad(set_to_none=True)
        total = 0.0  # a tensor after the first micro-batch: read after the step
        for i, mb in enumerate(local.split(m)):
            self.syncing(i == m - 1)
            with tl.span("forward", mb=i):
                loss = loss_fn(self.spec.cfg.kind)(self.model(mb.inputs), mb.targets) / m
            with tl.span("backward", mb=i):
                loss.backward()
            total = total + loss.detach()
        self.sync_gradients()
        with tl.span("optimizer"):
            self.opt.step()
        return StepOut(total, 1.0 / ctx.world)

    # -- gate
    def replicated(self):
        return [(None, list(self.model.named_parameters()))]

    # -- measurement and prediction
    def predicted_memory(self) -> dict:
        return self.peak_memory()

    def numels(self) -> list[int]:
        return [p.numel() for p in self.model.parameters()]

    def predicted_comm(self):
        return cost.dp_comm(self.numels(), self.spec.e, self.name, self.spec.cap_elems)

    def overlap_s(self, cal: calibration.Calibration, compute: list[dict]) -> float:
        if self.name == "dp_naive":
            return 0.0  # every all-reduce starts after backward
        last = cost.plan_buckets(self.numels(), self.spec.cap_elems)[-1]
        return self.backward_overlap(compute, cal.comm(self.predicted_comm()),
                                     cal.coll("all_reduce", last["numel"] * self.spec.e))


class GradBuckets:
    """Gradients in flat buckets in backward order (cost.plan_buckets), each
    all-reduced through `comm` (ctx.comm, or one mesh dimension's) as soon as its last
    gradient is accumulated - while ``sync`` is on (the step's last backward) - then
    averaged over the d ranks and copied back in ``finish``."""

    def __init__(self, params: list[torch.Tensor], cap_elems: int, comm: Any,
                 d: int) -> None:
        self.comm, self.d, self.sync = comm, d, False
        self.plan = cost.plan_buckets([p.numel() for p in params], cap_elems)
        self.buckets = []
        for index, b in enumerate(self.plan):
            members = [params[i] for i in b["params"]]
            flat = torch.zeros(b["numel"], device=params[0].device, dtype=params[0].dtype)
            self.buckets.append({"params": members, "flat": flat, "ready": 0, "work": None})
            for p in members:
                p.register_post_accumulate_grad_hook(self._hook(index))

    def _hook(self, index: int):
        def hook(_param: torch.Tensor) -> None:
            if not self.sync:
                return
            bucket = self.buckets[index]
            bucket["ready"] += 1
            if bucket["ready"] == len(bucket["params"]):
                torch.cat([p.grad.reshape(-1) for p in bucket["params"]], out=bucket["flat"])
                bucket["work"] = self.comm.all_reduce(bucket["flat"], async_op=True,
                                                      bucket=index)
        return hook

    def finish(self) -> None:
        for bucket in self.buckets:
            bucket["work"].wait()
            bucket["flat"].div_(self.d)
            offset = 0
            for p in bucket["params"]:
                n = p.numel()
                p.grad.copy_(bucket["flat"][offset:offset + n].view_as(p))
                offset += n
            bucket["ready"], bucket["work"] = 0, None
        self.sync = False

    def nbytes(self) -> int:
        return sum(b["flat"].numel() * b["flat"].element_size() for b in self.buckets)



class DataParallelBucket(DataParallelNaive):
    name = "dp_bucket"
    label = "data parallel, bucketed + overlapped"

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        self.grads = GradBuckets(list(self.model.parameters()), spec.cap_elems, ctx.comm,
                                 ctx.world)
        self.plan, self.buckets = self.grads.plan, self.grads.buckets

    def syncing(self, on: bool) -> None:
        self.grads.sync = on

    def sync_gradients(self) -> None:
        self.grads.finish()

    def model_state(self) -> dict[str, int]:
        state = super().model_state()
        state["comm_buffers"] = self.grads.nbytes()
        return state

    def predicted_memory(self) -> dict:
        P = self.spec.cfg.param_count()
        return self.peak_memory(buffers={"bucket buffers": P * self.spec.e})

    def extra(self) -> dict:
        return {"buckets": len(self.buckets)}
