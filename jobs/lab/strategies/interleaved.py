"""Interleaved 1F1B by hand (Narayanan et al. 2021; Megatron-LM's
forward_backward_pipelining_with_interleaving, PyTorch's ScheduleInterleaved1F1B).

The blocks are cut into p*v chunks (virtual stages); rank r holds chunks r, r+p, ...,
r+(v-1)p, so a micro-batch goes round the ranks v times (rank p-1 hands chunk c's output
to rank 0's chunk c+1). The order - warm-up forwards, one forward and one backward,
cool-down backwards over the v*m virtual micro-batches - is jobs/lab/predict/schedule.py's,
which is torch's: expected_order() gives it with the chunk, and the gate checks it from
the events. The fill and drain still take p-1 slots, but of one chunk, 1/v of a stage:
the bubble is (p-1)/(v*m+p-1), for v times 1F1B's point-to-point messages.

Messages as Megatron sends them: after each step (a warm-up forward, a steady
forward+backward, a cool-down backward) its sends and the next step's receives go out
as one batch_isend_irecv, the steady state's an activation and a gradient each way.
schedule_model.check_plan simulates every rank's batches under nccl's rules (in-order
matching per pair, a batch done when all its messages met theirs): no message is
received as another and no two ranks wait on each other.
"""

from __future__ import annotations

import torch
from torch import nn

from jobs.lab.components.instrument import SavedActivations
from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.predict import calibration, cost, memory
from jobs.lab.predict import schedule as schedule_model
from jobs.lab.strategies.base import StepOut, Strategy
from jobs.lab.strategies.pipeline_parallel import PipelineBase


def chunk_layers(L: int, p: int, v: int, stage: int) -> range:
    """Blocks of virtual stage `stage` (chunk stage // p of rank stage % p)."""
    return cost.stage_layers(L, p * v, stage)


class Chunks(nn.Module):
    """Rank r's v chunks of the model; parameter names keep the full model's (prefixed
    "model."), so gradients can be checked against the reference."""

    def __init__(self, model: nn.Module, rank: int, p: int, v: int) -> None:
        super().__init__()
        L = len(model.blocks)
        self.stages = [c * p + rank for c in range(v)]
        self.layers = [chunk_layers(L, p, v, s) for s in self.stages]
        keep = {str(i) for r in self.layers for i in r}
        for key in list(model.blocks.keys()):
            if key not in keep:
                del model.blocks[key]
        self.first, self.last = rank == 0, rank == p - 1
        self.n_stages = p * v
        for name in () if self.first else model.EMBED_MODULES:
            delattr(model, name)
        for name in () if self.last else model.FINISH_MODULES:
            delattr(model, name)
        self.model = model

    def forward(self, chunk: int, x: torch.Tensor) -> torch.Tensor:
        m, s = self.model, self.stages[chunk]
        if s == 0:
            x = m.embed(x)
        for i in self.layers[chunk]:
            x = m.blocks[str(i)](x)  # (b, T, h)
        return m.finish(x) if s == self.n_stages - 1 else x


class Interleaved1F1B(PipelineBase):
    name = "interleaved_1f1b"
    label = "interleaved 1F1B by hand (v virtual stages per rank)"
    schedule = "interleaved_1f1b"
    batched_receives = True  # a step's receives are one batch, waited for together

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)  # not PipelineBase's: v chunks, own messages
        cfg = spec.cfg
        self.p, self.rank, self.m = ctx.world, ctx.rank, spec.micro_batches
        self.v = int(spec.params.get("virtual_stages", 2))
        self.model = Chunks(build_model(cfg, ctx.device), self.rank, self.p, self.v)
        self.opt = self.optimizer(list(self.model.parameters()))
        self.mb_rows = spec.batch_size // self.m
        self.shape = (self.mb_rows, cfg.seq_len, cfg.hidden)
        self.loss = loss_fn(cfg.kind)
        self.steps = schedule_model.steps(self.p, self.m, self.v, self.rank)
        self.max_in_flight = 0
        self.first_mb_saved_bytes: int | None = None

    # -- messages
    def _post(self, sent: list, wanted: list) -> list[torch.Tensor]:
        """One batch: the step's sends (tensor, (peer, what)) and the next step's
        receives ((peer, what)); waited for when it receives, else at the step's end."""
        if not sent and not wanted:
            return []
        got = [torch.empty(self.shape, dtype=self.spec.cfg.torch_dtype, device=self.ctx.device)
               for _ in wanted]
        sends = [(t.contiguous(), peer) for t, (peer, _) in sent]
        out = [msg for _, (_, msg) in sent]
        into = [msg for _, msg in wanted]
        word = {"act": "fwd", "grad": "bwd"}  # as StageComm names them: fwd, bwd/fwd ...
        what = "/".join(x for x in ("-".join(word[k] for k, _, _ in out),
                                    "-".join(word[k] for k, _, _ in into)) if x)
        work = self.ctx.comm.p2p(sends=sends, recvs=[(t, peer) for t, (peer, _) in
                                                     zip(got, wanted, strict=True)],
                                 mb=(out + into)[0][2], dir=what)
        if wanted:
            work.wait()
        self.pending.append((work, sends))  # sent tensors live until the step's end
        return got

    def _needs(self, step: list) -> list:
        return [x for x in (schedule_model.needs(op, self.rank, self.p, self.v) for op in step)
                if x]

    # -- one virtual micro-batch each way
    def forward_op(self, mb: int, chunk: int, x: torch.Tensor, mbs: list[Batch]) -> torch.Tensor:
        s = self.model.stages[chunk]
        with self.ctx.timeline.span("forward", mb=mb, chunk=chunk, stage=self.rank):
            y = self.model(chunk, x)
            if s == self.p * self.v - 1:  # the last virtual stage's output is the loss
                y = self.loss(y, mbs[mb].targets) / self.m
                self.losses.append(y.detach())
        self.in_flight[chunk].append((x, y))
        self.max_in_flight = max(self.max_in_flight, sum(map(len, self.in_flight)))
        meter = SavedActivations.active
        if meter is not None and self.first_mb_saved_bytes is None:
            self.first_mb_saved_bytes = meter.current  # one chunk's micro-batch
        return y

    def backward_op(self, mb: int, chunk: int, grad_out: torch.Tensor | None):
        x, y = self.in_flight[chunk].pop(0)
        with self.ctx.timeline.span("backward", mb=mb, chunk=chunk, stage=self.rank):
            torch.autograd.backward(y, grad_tensors=grad_out)  # None on the loss
        return None if self.model.stages[chunk] == 0 else x.grad

    # -- the step
    def train_step(self, batch: Batch) -> StepOut:
        mbs = batch.to(self.ctx.device).split(self.m)
        self.opt.zero_grad(set_to_none=True)
        self.in_flight: list[list] = [[] for _ in range(self.v)]
        self.losses: list[torch.Tensor] = []
        self.pending: list = []
        self.run_schedule(mbs)
        for work, _ in self.pending:
            work.wait()
        self.pending = []
        with self.ctx.timeline.span("optimizer"):
            self.opt.step()
        return StepOut(sum(self.losses), 1.0 if self.rank == self.p - 1 else 0.0)

    def run_schedule(self, mbs: list[Batch]) -> None:
        received = self._post([], self._needs(self.steps[0]))
        for j, step in enumerate(self.steps):
            sent = []
            for op in step:
                kind, mb, chunk = op
                if schedule_model.needs(op, self.rank, self.p, self.v):
                    x = received.pop(0)
                else:
                    x = None if kind == "backward" else mbs[mb].inputs
                if kind == "forward":
                    if self.model.stages[chunk]:
                        x.requires_grad_()
                    out = self.forward_op(mb, chunk, x, mbs)
                    out = out.detach()
                else:
                    out = self.backward_op(mb, chunk, x)
                msg = schedule_model.sends(op, self.rank, self.p, self.v)
                if msg:
                    sent.append((out, msg))
            nxt = self._needs(self.steps[j + 1]) if j + 1 < len(self.steps) else []
            received = self._post(sent, nxt)

    # -- the gate
    def expected_order(self) -> list[tuple[str, int, int]]:
        """schedule_model.order: (forward|backward, micro-batch, chunk)."""
        return schedule_model.order(self.p, self.m, self.v, self.rank)

    def expected_in_flight(self) -> int:
        return schedule_model.in_flight(self.expected_order())

    # -- measurement and prediction
    def local_layers(self) -> range:
        return range(sum(len(r) for r in self.model.layers))

    def predicted_comm(self):
        """Every send and receive is one micro-batch's activation or gradient: on a
        middle rank v times 1F1B's 2m each way (schedule_model.messages)."""
        c = schedule_model.messages(self.p, self.m, self.v, self.rank)
        return {k: {"bytes": n * self.mb_bytes(), "count": n} for k, n in c.items() if n}

    def predict(self, cal: calibration.Calibration, compute: list[dict]) -> dict:
        """The pipeline formula with v*m slots of a chunk (1/v of the stage's work) and
        the rank's waited receives spread over them: T = (v*m + p - 1) slots + optimizer
        for equal chunks."""
        def terms(c: dict, per_mb: bool) -> dict:
            names = [k for k in c if (k in ("forward", "backward", "schedule")) == per_mb]
            return {t: sum(c[k][t] for k in names) for t in cost.COMPUTE_TERMS}

        t_p2p = cal.coll("send_recv", self.mb_bytes())
        fb = [terms(c, True) for c in compute]
        opt = [terms(c, False) for c in compute]
        return schedule_model_prediction(fb, opt, self.m, self.v, t_p2p,
                                         batched=self.batched_receives)

    def chunk_activations(self, chunk: int) -> float:
        c, s = self.spec.cfg, self.model.stages[chunk]
        return memory.activations(
            c.kind, len(self.model.layers[chunk]), self.local_tokens(), c.hidden, c.heads,
            c.vocab, self.spec.e, first=s == 0, last=s == self.p * self.v - 1,
            inputs=self.ctx.is_cuda)

    def chunk_params(self, chunk: int) -> int:
        c = self.spec.cfg
        return cost.stage_params(c.kind, c.layers, c.hidden, c.seq_len, c.vocab,
                                      self.p * self.v, self.model.stages[chunk])

    def predicted_memory(self) -> dict:
        """Walk the schedule: before each backward this rank holds the activations of
        every forward not yet backed (each chunk's own size), every message sent so far
        (kept until the step's end), the gradients of the chunks already backed once,
        and the backward's working set (and on the last virtual stage the loss's
        gradient); the step ends holding every gradient and message."""
        c, e, n = self.spec.cfg, self.spec.e, self.local_tokens()
        P = sum(self.chunk_params(k) for k in range(self.v))
        state = memory.model_state(self.precision, P)
        grad_e = memory.RECIPES[self.precision]["grad"]
        held = {"params": state["params"], "optimizer": state["optimizer"]}
        work = memory.backward_working_set(n, c.hidden, e)
        mb = self.mb_bytes()
        last_stage = self.p * self.v - 1
        moments: dict[str, dict[str, float]] = {}
        for at in schedule_model.held_at_backwards(self.p, self.m, self.v, self.rank):
            _, i, chunk = at["op"]
            acts = sum(self.chunk_activations(k) for _, k in at["live"])
            base = {"activations": acts, "sends held": sum(at["sent"].values()) * mb,
                    "grads": sum(self.chunk_params(k) for k in at["graded"]) * grad_e}
            if self.model.stages[chunk] == last_stage:
                head = memory.finish_activations(c.kind, n, c.hidden, c.vocab, e,
                                                      self.ctx.is_cuda)
                moments[f"loss backward B{i}.{chunk}"] = {
                    **base, "loss gradient": memory.loss_gradient(
                        c.kind, n, c.hidden, c.vocab, e)}
                moments[f"first block backward B{i}.{chunk}"] = {
                    **base, "activations": acts - head, "working set": work,
                    "head gradients": memory.finish_params(c.kind, c.hidden, c.vocab)
                    * grad_e}
            else:
                moments[f"backward B{i}.{chunk}"] = {**base, "working set": work}
        sent = schedule_model.messages(self.p, self.m, self.v, self.rank)["send"]
        moments["backward end"] = {"grads": state["grads"], "sends held": sent * mb}
        if self.precision == "bf16_adamw":
            moments["optimizer step"] = {"grads": state["grads"],
                                         "AdamW temporaries": 8 * self.largest_update()}
        largest = max(moments, key=lambda k: sum(moments[k].values()))
        keep = {k: v for k, v in moments.items()
                if k == largest or not k.startswith(("backward B", "loss", "first"))}
        peak = memory.peak(held, keep)
        one = self.chunk_activations(0)
        return {**peak, "model_state": state,
                "activations": sum(self.chunk_activations(k) for k in range(self.v)),
                "one_micro_batch_activations": one}

    def extra(self) -> dict:
        c = self.spec.cfg
        return {"stage": self.rank, "virtual_stages": self.v,
                "chunks": {str(s): list(r) for s, r in zip(self.model.stages,
                                                          self.model.layers, strict=True)},
                "micro_batches": self.m,
                "warmup_forwards": schedule_model.warmup(self.p, self.m, self.v, self.rank),
                "max_in_flight": self.max_in_flight,
                "expected_max_in_flight": self.expected_in_flight(),
                "one_micro_batch_saved_bytes": self.first_mb_saved_bytes,
                "predicted_one_micro_batch_block_bytes":
                    len(self.model.layers[0]) * memory.block_activations(
                        c.kind, self.local_tokens(), c.hidden, c.heads, self.spec.e),
                "bubble_formula": schedule_model.interleaved_bubble(self.p, self.m, self.v)}


def schedule_model_prediction(fb: list[dict], opt: list[dict], m: int, v: int,
                              t_p2p: float, slots_per_chunk: int = 1,
                              batched: bool = True, inside: list[dict] | None = None) -> dict:
    """costmodel.predict_pipeline over v*m chunk slots (or `slots_per_chunk` times as
    many): a rank's per-step compute split into equal slots, the first crossing all p
    stages, the rest at the slowest rank's pace; each rank's waited batches of receives
    (schedule_model.receive_waits) spread over its slots; `inside` (per rank, named
    seconds) lengthens them as compute does; bubble (p-1)/(v*m+p-1)."""
    p, n = len(fb), slots_per_chunk * v * m
    waits = [schedule_model.receive_waits(p, m, v, r, batched) / n for r in range(p)]
    out = cost.predict_pipeline(fb, opt, n, t_p2p, inside=inside, waits=waits)
    return {**out, "bubble_fraction": schedule_model.interleaved_bubble(p, m, v),
            "formula": "T = sum_r slot_r + (v*m-1) max_r slot_r + optimizer, slot_r = "
                       "(t_f + t_b)_r / (v*m) + waits_r t_p2p (the rank's waited "
                       "receives per slot); bubble = (p-1)/(v*m+p-1)"}
