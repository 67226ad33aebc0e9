"""torch.distributed.pipelining's multi-stage schedules over the same v chunks per rank
as the hand-written interleaved 1F1B (rank r holds virtual stages r, r+p, ...):
ScheduleInterleaved1F1B, and ScheduleInterleavedZeroBubble (ZB1P, Qi et al. 2024), which
splits each backward into the input gradient (B, on the critical path) and the weight
gradient (W, run later to fill what would be bubble). Each chunk is its own
PipelineStage; the runtime (_PipelineScheduleRuntime) lowers the order to sends and
receives itself, so the census counts them. Shapes are passed statically, as in
torch_pipelining.py."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
)

from jobs.lab.components.model import Batch, build_model, loss_fn, make_batch
from jobs.lab.predict import cost, memory, schedule
from jobs.lab.strategies.base import StepOut, Strategy
from jobs.lab.strategies.interleaved import Chunks, Interleaved1F1B, schedule_model_prediction


class ChunkModule(nn.Module):
    """One virtual stage as its own module, holding only its blocks (and the embedding or
    head): PipelineStage scales and splits the gradients of exactly these parameters. The
    modules are the rank's Chunks', shared."""

    def __init__(self, chunks: Chunks, chunk: int) -> None:
        super().__init__()
        model, s = chunks.model, chunks.stages[chunk]
        self.first, self.last = s == 0, s == chunks.n_stages - 1
        self.blocks = nn.ModuleList([model.blocks[str(i)] for i in chunks.layers[chunk]])
        for name in model.EMBED_MODULES if self.first else ():
            setattr(self, name, getattr(model, name))
        for name in model.FINISH_MODULES if self.last else ():
            setattr(self, name, getattr(model, name))
        self._embed, self._finish = model.embed, model.finish  # bound: no module here

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = self._embed(x)
        for blk in self.blocks:
            x = blk(x)
        return self._finish(x) if self.last else x


class TorchInterleaved1F1B(Interleaved1F1B):
    name = "torch_interleaved_1f1b"
    label = "torch.distributed.pipelining ScheduleInterleaved1F1B"
    builtin = True
    instrumented = False
    schedule_cls = ScheduleInterleaved1F1B
    batched_receives = False  # torch's schedule runtime posts and waits each RECV alone

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)
        cfg = spec.cfg
        self.p, self.rank, self.m = ctx.world, ctx.rank, spec.micro_batches
        self.v = int(spec.params.get("virtual_stages", 2))
        self.model = Chunks(build_model(cfg, ctx.device), self.rank, self.p, self.v)
        self.opt = self.optimizer(list(self.model.parameters()))
        self.mb_rows = spec.batch_size // self.m
        T, h = cfg.seq_len, cfg.hidden
        last_stage = self.p * self.v - 1
        stages = []
        for c, s in enumerate(self.model.stages):
            if s == 0:
                example_in = make_batch(cfg, self.mb_rows).inputs.to(ctx.device)
            else:  # the received activation needs a gradient, else none is sent back
                example_in = torch.zeros(self.mb_rows, T, h, dtype=cfg.torch_dtype,
                                         device=ctx.device).requires_grad_()
            width = cfg.vocab if cfg.kind == "gpt" and s == last_stage else h
            example_out = torch.zeros(self.mb_rows, T, width, dtype=cfg.torch_dtype,
                                      device=ctx.device).requires_grad_()
            stages.append(PipelineStage(ChunkModule(self.model, c), s, self.p * self.v,
                                        ctx.device, input_args=example_in,
                                        output_args=example_out, group=ctx.group))
        for c, stage in enumerate(stages):
            self._record(stage, c)
        self.schedule = self.schedule_cls(stages, self.m, loss_fn=loss_fn(cfg.kind))
        self.max_in_flight = None
        self.first_mb_saved_bytes = None

    def _record(self, stage: PipelineStage, chunk: int) -> None:
        """Wrap the stage's compute in the timeline's forward/backward spans (the weight
        gradient W a backward too, marked part="weight"), so the events give the order
        torch ran and the step's idle fraction, as the hand-written schedule's do."""
        tl, rank = self.ctx.timeline, self.rank
        fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk
        wgt = stage.backward_weight_one_chunk

        def forward_one_chunk(mb, *args, **kwargs):
            with tl.span("forward", mb=mb, chunk=chunk, stage=rank):
                return fwd(mb, *args, **kwargs)

        def backward_one_chunk(mb, *args, **kwargs):
            with tl.span("backward", mb=mb, chunk=chunk, stage=rank):
                return bwd(mb, *args, **kwargs)

        def backward_weight_one_chunk(mb, *args, **kwargs):
            with tl.span("backward", mb=mb, chunk=chunk, stage=rank, part="weight"):
                return wgt(mb, *args, **kwargs)

        stage.forward_one_chunk = forward_one_chunk
        stage.backward_one_chunk = backward_one_chunk
        stage.backward_weight_one_chunk = backward_weight_one_chunk

    def train_step(self, batch: Batch) -> StepOut:
        b = batch.to(self.ctx.device)
        self.opt.zero_grad(set_to_none=True)
        losses: list = []
        first, last = self.rank == 0, self.rank == self.p - 1
        with self.ctx.timeline.span("schedule", stage=self.rank):
            if first and last:
                self.schedule.step(b.inputs, target=b.targets, losses=losses)
            elif first:
                self.schedule.step(b.inputs)
            elif last:
                self.schedule.step(target=b.targets, losses=losses)
            else:
                self.schedule.step()
        with self.ctx.timeline.span("optimizer"):
            self.opt.step()
        loss = sum(v.detach() for v in losses) / self.m if last else 0.0
        return StepOut(loss, 1.0 if last else 0.0)

    def expected_order(self) -> list[tuple[str, int, int]]:
        """torch's runtime runs the hand-written order (the events say so, gated)."""
        return schedule.order(self.p, self.m, self.v, self.rank)

    def torch_order(self) -> list[tuple[str, int, int]]:
        """The schedule's own order for this rank, as (kind, micro-batch, chunk): F, B
        (full backward or input gradient) and W (weight gradient)."""
        names = {"F": "forward", "B": "backward", "I": "backward", "W": "weight"}
        out = []
        for a in self.schedule.pipeline_order[self.rank]:
            if a is None or a.computation_type.value not in names:
                continue
            out.append((names[a.computation_type.value], a.microbatch_index,
                        a.stage_index // self.p))
        return out

    def predicted_memory(self) -> dict:
        """The hand-written schedule's walk (the same order), and what each PipelineStage
        keeps between steps: a receive buffer per micro-batch and direction it receives,
        and (the last virtual stage) every micro-batch's output, for the schedule to merge."""
        mem = super().predicted_memory()
        c, n, e = self.spec.cfg, self.local_tokens(), self.spec.e
        last_stage = self.p * self.v - 1
        buffers = sum(self.m * self.mb_bytes() * ((s != 0) + (s != last_stage))
                      for s in self.model.stages)
        kept = {"receive buffers": buffers,
                "outputs kept": self.m * n * (c.vocab if c.kind == "gpt" else c.hidden) * e
                if last_stage in self.model.stages else 0}
        return {**mem, "held": {**mem["held"], **kept},
                "total": mem["total"] + sum(kept.values())}

    def extra(self) -> dict:
        order = self.torch_order()
        return {"stage": self.rank, "virtual_stages": self.v, "micro_batches": self.m,
                "torch_order": " ".join(f"{k[0].upper()}{mb}.{c}" for k, mb, c in order),
                "matches_hand_order": [x for x in order if x[0] != "weight"]
                == schedule.order(self.p, self.m, self.v, self.rank),
                "bubble_formula": schedule.interleaved_bubble(self.p, self.m, self.v)}


class TorchZeroBubble(TorchInterleaved1F1B):
    name = "torch_zero_bubble"
    label = "torch.distributed.pipelining ScheduleInterleavedZeroBubble"
    schedule_cls = ScheduleInterleavedZeroBubble

    def expected_order(self) -> list[tuple[str, int, int]]:
        """torch's own ZB1P order, its W's recorded as backwards (the in-flight count of
        the gate then falls twice per micro-batch, on both sides alike)."""
        return [("backward" if k == "weight" else k, mb, c) for k, mb, c in self.torch_order()]

    def predict(self, cal, compute: list[dict]) -> dict:
        """The pipeline formula over 3*v*m slots of a third (F, B or W, t_F = t_B = t_W
        assumed), the rank's waited receives spread over them, and the backward's second
        autograd pass (cost.split_backward_s) inside the slots: bubble (p-1)/(3*v*m+p-1),
        the claim."""
        out = super().predict(cal, compute)
        fb = [{t: sum(c[k][t] for k in c if k in ("forward", "backward", "schedule"))
               for t in cost.COMPUTE_TERMS} for c in compute]
        opt = [{t: sum(c[k][t] for k in c if k not in ("forward", "backward", "schedule"))
                for t in cost.COMPUTE_TERMS} for c in compute]
        t_p2p = cal.coll("send_recv", self.mb_bytes())
        split = [{"split_backward": cost.split_backward_s(c.get("backward", {}))}
                 for c in compute]
        zb = schedule_model_prediction(fb, opt, self.m, self.v, t_p2p, slots_per_chunk=3,
                                       batched=self.batched_receives, inside=split)
        claim = schedule.zero_bubble_claim(self.p, self.m, self.v)
        # the card judges the backward spans against this too; ranks as gathered (all
        # of a pipeline's ranks take part)
        extra = {str(r): {"backward": x["split_backward"]} for r, x in enumerate(split)}
        return {**out, **zb, "bubble_fraction": claim, "phase_extra_s": extra,
                "interleaved_prediction_s":
                out["step_time_s"], "formula": "T = (3*v*m + p - 1) slots of "
                "(t_f+t_b+t_split)/(3*v*m) + optimizer (F, B, W a third each; t_split: "
                "the backward operators' overhead once more, for its second autograd "
                "pass); bubble = (p-1)/(3*v*m+p-1)"}

    def weight_grad_inputs(self, chunk: int) -> float:
        """What a chunk's B keeps for its W: the gradient at the output of every op with
        a weight (GPT block: LayerNorms h, h; qkv 3h; projection h; MLP 4h, h per token;
        MLP block: 4h, h), and the embedding's and head's."""
        c, n, e, s = self.spec.cfg, self.local_tokens(), self.spec.e, self.model.stages[chunk]
        per_block = 11 if c.kind == "gpt" else 5
        total = len(self.model.layers[chunk]) * per_block * n * c.hidden * e
        if s == 0:
            total += (2 if c.kind == "gpt" else 1) * n * c.hidden * e
        if s == self.p * self.v - 1:
            total += n * (c.hidden + (c.vocab if c.kind == "gpt" else c.hidden)) * e
        return total

    def predicted_memory(self) -> dict:
        """Walk torch's own order: a forward's activations live until its weight
        gradient (W), and its B adds the output gradients W will need (B frees none of
        the activations); the rest of the peak moment as in interleaved 1F1B."""
        mem = super().predicted_memory()
        live = most = 0.0
        for kind, _mb, chunk in self.torch_order():
            if kind == "forward":
                live += self.chunk_activations(chunk)
            elif kind == "backward":
                live += self.weight_grad_inputs(chunk)
                most = max(most, live)
            else:
                live -= self.chunk_activations(chunk) + self.weight_grad_inputs(chunk)
        rest = {k: v for k, v in mem["transient"].items() if k != "activations"}
        transient = {"activations and kept output gradients": most, **rest}
        return {**mem, "transient": transient, "peak_at": "zero-bubble walk",
                "total": sum(mem["held"].values()) + sum(transient.values())}

    def extra(self) -> dict:
        c = self.spec.cfg
        return {**super().extra(),
                "bubble_claim": schedule.zero_bubble_claim(self.p, self.m, self.v),
                "weight_grad_block_bytes": memory.block_activations(
                    c.kind, self.local_tokens(), c.hidden, c.heads, self.spec.e)}
