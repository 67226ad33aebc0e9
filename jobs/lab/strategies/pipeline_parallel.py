"""Pipeline parallelism by hand: naive model parallel, GPipe (AFAB) and 1F1B.

The model's blocks are cut into p consecutive stages, one per rank; stage 0 also
owns the embedding, the last stage the head and the loss. A batch is cut into m
micro-batches. GPipe runs all m forwards, then all m backwards, so each stage holds
m micro-batches of activations; 1F1B (PipeDream-flush, Narayanan et al. 2021) starts
backward as soon as the last stage can, so stage r holds at most min(p - r, m).
Both leave (p-1)/(m+p-1) of the step idle; naive model parallelism is m = 1.
The schedules read like the diagrams: warm-up, steady state, cool-down.
"""

from __future__ import annotations

import torch
from torch import nn

from jobs.lab.components.instrument import SavedActivations
from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.predict import calibration, cost, memory
from jobs.lab.strategies.base import StepOut, Strategy
from jobs.lab.strategies.pp_communications import StageComm


class Stage(nn.Module):
    """The part of the model one rank owns; parameter names keep the full model's
    (prefixed "model."), so gradients can be checked against the reference."""

    def __init__(self, model: nn.Module, rank: int, p: int) -> None:
        super().__init__()
        keep = {str(i) for i in cost.stage_layers(len(model.blocks), p, rank)}
        for key in list(model.blocks.keys()):
            if key not in keep:
                del model.blocks[key]
        self.first, self.last = rank == 0, rank == p - 1
        for name in () if self.first else model.EMBED_MODULES:
            delattr(model, name)
        for name in () if self.last else model.FINISH_MODULES:
            delattr(model, name)
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.model
        if self.first:
            x = m.embed(x)
        for blk in m.blocks.values():
            x = blk(x)  # (b, T, h)
        return m.finish(x) if self.last else x


class PipelineBase(Strategy):
    schedule = "gpipe"
    unmodelled = Strategy.unmodelled + (
        "waits on a neighbouring stage beyond the pipeline formula (p2p latency jitter)",)
    name_prefix = "model."  # self.model is this rank's Stage

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        cfg = spec.cfg
        self.p, self.rank = ctx.world, ctx.rank
        self.m = self.micro_batches()
        self.model = Stage(build_model(cfg, ctx.device), self.rank, self.p)
        self.opt = self.optimizer(list(self.model.parameters()))
        self.mb_rows = spec.batch_size // self.m
        self.io = StageComm(ctx, (self.mb_rows, cfg.seq_len, cfg.hidden), cfg.torch_dtype)
        self.loss = loss_fn(cfg.kind)
        self.max_in_flight = 0
        self.first_mb_saved_bytes: int | None = None

    def micro_batches(self) -> int:
        return self.spec.micro_batches

    # -- one micro-batch each way
    def forward_mb(self, i: int, x: torch.Tensor, mbs: list[Batch]) -> torch.Tensor:
        with self.ctx.timeline.span("forward", mb=i, stage=self.rank):
            y = self.model(x)
            if self.io.last:  # the last stage's output is the loss of the micro-batch
                y = self.loss(y, mbs[i].targets) / self.m
                self.losses.append(y.detach())
        self.in_flight.append((x, y))
        self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
        meter = SavedActivations.active
        if meter is not None and self.first_mb_saved_bytes is None:
            self.first_mb_saved_bytes = meter.current  # one micro-batch's activations
        return y

    def backward_mb(self, i: int, grad_out: torch.Tensor | None) -> torch.Tensor | None:
        x, y = self.in_flight.pop(0)
        with self.ctx.timeline.span("backward", mb=i, stage=self.rank):
            torch.autograd.backward(y, grad_tensors=grad_out)  # grad_out None on the loss
        return None if self.io.first else x.grad

    def input_of(self, i: int, mbs: list[Batch]) -> torch.Tensor:
        return mbs[i].inputs if self.io.first else self.io.recv_forward(i)

    # -- the step
    def train_step(self, batch: Batch) -> StepOut:
        mbs = batch.to(self.ctx.device).split(self.m)
        self.opt.zero_grad(set_to_none=True)
        self.in_flight: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.losses: list[torch.Tensor] = []
        self.run_schedule(mbs)
        self.io.flush()
        with self.ctx.timeline.span("optimizer"):
            self.opt.step()
        return StepOut(sum(self.losses), 1.0 if self.io.last else 0.0)

    def run_schedule(self, mbs: list[Batch]) -> None:
        """GPipe / all-forward-all-backward."""
        for i in range(self.m):
            y = self.forward_mb(i, self.input_of(i, mbs), mbs)
            self.io.send_forward(y, i)
        for i in range(self.m):
            grad_in = self.backward_mb(i, self.io.recv_backward(i))
            self.io.send_backward(grad_in, i)

    # -- measurement and prediction
    def _dims(self) -> tuple:
        c = self.spec.cfg
        return c.kind, c.layers, c.hidden, c.seq_len, c.vocab

    def local_layers(self) -> range:
        return cost.stage_layers(self.spec.cfg.layers, self.p, self.rank)

    def local_tokens(self) -> int:
        return self.mb_rows * self.spec.cfg.seq_len

    def predicted_memory(self) -> dict:
        """The stage's state and, at each backward, the activations of the micro-batches
        it holds and the messages it sent (StageComm keeps every send until the step's
        flush): k forward sends at the first; at a later one a forward more and a
        backward; at the end all 2m."""
        first, last = self.rank == 0, self.rank == self.p - 1
        k, m, mb = self.expected_in_flight(), self.m, self.mb_bytes()
        fwd, bwd = (0 if last else mb), (0 if first else mb)
        again = k if m > k else m - 1
        return self.peak_memory(
            P=cost.stage_params(*self._dims(), self.p, self.rank), in_flight=k,
            first=first, last=last, start={"sends held": k * fwd},
            later={"sends held": min(m, again + 1) * fwd + bwd},
            end={"sends held": m * (fwd + bwd)})

    def mb_bytes(self) -> int:
        c = self.spec.cfg
        return self.mb_rows * c.seq_len * c.hidden * self.spec.e

    def predicted_comm(self):
        return cost.pp_comm(self.rank, self.p, self.m, self.mb_bytes())

    def predict(self, cal: calibration.Calibration, compute: list[dict]) -> dict:
        """Per stage: forward+backward (spans "forward", "backward"; PyTorch's schedules:
        "schedule") per micro-batch, the rest once per step; composed by the pipeline
        formula with one send/recv of a micro-batch's activation per boundary crossing."""
        def terms(c: dict, per_mb: bool) -> dict:
            names = [k for k in c if (k in ("forward", "backward", "schedule")) == per_mb]
            return {t: sum(c[k][t] for k in names) for t in cost.COMPUTE_TERMS}

        t_p2p = cal.coll("send_recv", self.mb_bytes()) if self.p > 1 else 0.0
        return cost.predict_pipeline([terms(c, True) for c in compute],
                                          [terms(c, False) for c in compute], self.m, t_p2p)

    def extra(self) -> dict:
        c = self.spec.cfg
        n_layers = len(self.local_layers())
        return {"stage": self.rank, "layers": list(self.local_layers()),
                "micro_batches": self.m,
                "max_in_flight": self.max_in_flight,
                "expected_max_in_flight": self.expected_in_flight(),
                "one_micro_batch_saved_bytes": self.first_mb_saved_bytes,
                "predicted_one_micro_batch_block_bytes":
                    n_layers * memory.block_activations(
                        c.kind, self.local_tokens(), c.hidden, c.heads, self.spec.e)}

    def expected_in_flight(self) -> int:
        return self.m

    def expected_order(self) -> list[tuple[str, int]]:
        """GPipe: F0 .. F(m-1), then B0 .. B(m-1)."""
        return [("forward", i) for i in range(self.m)] + [("backward", i) for i in range(self.m)]


class NaiveModelParallel(PipelineBase):
    name = "naive_mp"
    label = "naive model parallel (one batch, no micro-batches)"

    def micro_batches(self) -> int:
        return 1


class GPipe(PipelineBase):
    name = "gpipe"
    label = "GPipe by hand (all forward, all backward)"


class OneFOneB(PipelineBase):
    name = "1f1b"
    label = "1F1B by hand (one forward, one backward)"

    def expected_in_flight(self) -> int:
        return min(self.p - self.rank, self.m)

    def expected_order(self) -> list[tuple[str, int]]:
        """Warm-up forwards, then one forward and one backward, then the backwards owed."""
        warmup = min(self.p - self.rank - 1, self.m)
        order = [("forward", i) for i in range(warmup)]
        for k in range(self.m - warmup):
            order += [("forward", warmup + k), ("backward", k)]
        return order + [("backward", i) for i in range(self.m - warmup, self.m)]

    def run_schedule(self, mbs: list[Batch]) -> None:
        io, m = self.io, self.m
        warmup = min(self.p - self.rank - 1, m)
        remaining = m - warmup
        fwd = bwd = 0
        # warm-up: forwards only, filling the pipe
        for _ in range(warmup):
            y = self.forward_mb(fwd, self.input_of(fwd, mbs), mbs)
            io.send_forward(y, fwd)
            fwd += 1
        x = self.input_of(fwd, mbs) if remaining else None
        # steady state: one forward, one backward
        for k in range(remaining):
            y = self.forward_mb(fwd, x, mbs)
            grad_out = io.send_forward_recv_backward(y, fwd)
            fwd += 1
            grad_in = self.backward_mb(bwd, grad_out)
            if k == remaining - 1:
                io.send_backward(grad_in, bwd)
            elif io.first:
                x = mbs[fwd].inputs
            else:
                x = io.send_backward_recv_forward(grad_in, bwd)
            bwd += 1
        # cool-down: the backwards still owed
        for _ in range(warmup):
            grad_in = self.backward_mb(bwd, io.recv_backward(bwd))
            io.send_backward(grad_in, bwd)
            bwd += 1
