"""torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B over the same stages
as the hand-written schedules. Schedules divide gradients by the number of
micro-batches (scale_grads), which with a per-micro-batch mean loss gives the
full-batch mean; the first step would infer shapes; we pass them statically (shape inference pickles
through numpy), and the gate's step is never timed anyway.
Its send/recv calls are PyTorch's own: the census counts them from the dispatcher."""

from __future__ import annotations

import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from jobs.lab.components.model import Batch, build_model, loss_fn, make_batch
from jobs.lab.strategies.base import StepOut, Strategy
from jobs.lab.strategies.pipeline_parallel import OneFOneB, PipelineBase, Stage


class TorchPipelineBase(PipelineBase):
    builtin = True
    instrumented = False
    schedule_cls = ScheduleGPipe

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)  # not PipelineBase's: the schedule talks itself
        cfg = spec.cfg
        self.p, self.rank, self.m = ctx.world, ctx.rank, spec.micro_batches
        self.mb_rows = spec.batch_size // self.m
        self.model = Stage(build_model(cfg, ctx.device), self.rank, self.p)
        self.opt = self.optimizer(list(self.model.parameters()))
        self.first, self.last = self.rank == 0, self.rank == self.p - 1
        # static shapes: no metadata inference round (which pickles through numpy)
        T, h = cfg.seq_len, cfg.hidden
        act = torch.zeros(self.mb_rows, T, h, dtype=cfg.torch_dtype, device=ctx.device)
        if self.first:
            example_in = make_batch(cfg, self.mb_rows).inputs.to(ctx.device)
        else:  # the received activation needs a gradient, else none is sent back
            example_in = act.clone().requires_grad_()
        out_width = cfg.vocab if cfg.kind == "gpt" else h
        # outputs must say they need a gradient, or none is received for them
        example_out = torch.zeros(self.mb_rows, T, out_width, dtype=cfg.torch_dtype,
                                  device=ctx.device).requires_grad_() if self.last else \
            act.clone().requires_grad_()
        pipe_stage = PipelineStage(self.model, self.rank, self.p, ctx.device,
                                   input_args=example_in, output_args=example_out,
                                   group=ctx.group)
        self.schedule = self.schedule_cls(pipe_stage, self.m, loss_fn=loss_fn(cfg.kind))
        self.max_in_flight = None
        self.first_mb_saved_bytes = None

    def train_step(self, batch: Batch) -> StepOut:
        b = batch.to(self.ctx.device)
        self.opt.zero_grad(set_to_none=True)
        losses: list = []
        with self.ctx.timeline.span("schedule", stage=self.rank):
            if self.first:
                self.schedule.step(b.inputs)
            elif self.last:
                self.schedule.step(target=b.targets, losses=losses)
            else:
                self.schedule.step()
        with self.ctx.timeline.span("optimizer"):
            self.opt.step()
        loss = sum(v.detach() for v in losses) / self.m if self.last else 0.0
        return StepOut(loss, 1.0 if self.last else 0.0)

    def predicted_memory(self) -> dict:
        """The hand-written stage's, and what PipelineStage keeps between steps: a receive
        buffer per micro-batch and direction, and (last stage) every micro-batch's output,
        for the schedule to merge."""
        mem = super().predicted_memory()
        c, n, e = self.spec.cfg, self.local_tokens(), self.spec.e
        kept = {"receive buffers": self.m * self.mb_bytes() * ((not self.first) + (not self.last)),
                "outputs kept": self.m * n * (c.vocab if c.kind == "gpt" else c.hidden) * e
                if self.last else 0}
        held = {**mem["held"], **kept}
        return {**mem, "held": held, "total": mem["total"] + sum(kept.values())}

    def extra(self) -> dict:
        return {"stage": self.rank, "micro_batches": self.m}

    def expected_order(self) -> None:
        return None  # the schedule is PyTorch's, and records no micro-batch events here


class TorchGPipe(TorchPipelineBase):
    name = "torch_gpipe"
    label = "torch.distributed.pipelining ScheduleGPipe"
    schedule_cls = ScheduleGPipe


class Torch1F1B(TorchPipelineBase):
    name = "torch_1f1b"
    label = "torch.distributed.pipelining Schedule1F1B"
    schedule_cls = Schedule1F1B
    expected_in_flight = OneFOneB.expected_in_flight
