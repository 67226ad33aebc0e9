"""Expert parallelism by hand (GShard; Megatron-LM's and DeepSpeed-MoE's "EP"): every
block's mixture-of-experts MLP (jobs/lab/components/moe.py) has its E experts split over the d
ranks, E/d each; everything else is data parallel - each rank a replica of the
attention, embeddings, norms and routers, 1/d of the batch, those gradients
all-reduced (one call per tensor, as dp_naive).

Per MoE layer, forward: route the local tokens, fill the static capacity buffer
(E, b*C, h) - expert-major, so rank r's experts are the r-th of d equal chunks - and
all_to_all it (dispatch): rank r now holds, from every rank, the rows of its own
experts. Each local expert runs on its d*b*C rows, and a second all_to_all sends the
outputs back (combine), where each token gathers its rows. Backward runs the two
transposes: the gradient of the combine's output travels back like a dispatch, and
the dispatch's like a combine (autograd Functions around the all-to-alls). Expert
gradients need no all-reduce: each expert lives on one rank and got every rank's
tokens. Capacity buffers have static shapes: no sizes to exchange first, and the
bytes are exactly 4L x E*b*C*h*e per step (moecost.alltoall_bytes).

``extra()`` shows the load: tokens routed to each expert per layer, kept and dropped,
summed over the ranks, and a dense baseline - the same GPT with a dense MLP of the
same active FLOPs (the MLP itself when k = 1, k times as wide when k > 1), data
parallel the same way - timed beside the MoE step. It cannot pass the gate against
the MoE reference, so it is a measurement of this strategy, not a strategy.

Routing is discontinuous: under bf16 the replicas' parameters drift from the reference's
by rounding, and a token near a tie (or at a full expert's queue) can change expert -
the bf16 gate can fail on that, the fp32 gate cannot (notes: exp-experts.md).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import torch
from torch import nn

from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.components.moe import Expert, MoE
from jobs.lab.components.optim import make_optimizer
from jobs.lab.predict import cost
from jobs.lab.predict import experts as moecost
from jobs.lab.strategies.base import StepOut, Strategy

BASELINE_STEPS = 3  # timed steps of each of the MoE and the dense model, alternating


class AllToAll(torch.autograd.Function):
    """all_to_all_single of equal chunks through the counting wrapper; its gradient is
    the same exchange in reverse (equal chunks: the same call)."""

    @staticmethod
    def forward(fctx: Any, x: torch.Tensor, comm: Any, group: Any, what: str) -> torch.Tensor:
        fctx.comm, fctx.group, fctx.what = comm, group, what
        out = torch.empty_like(x)
        comm.all_to_all(out, x.contiguous(), group=group, what=what)
        return out

    @staticmethod
    def backward(fctx: Any, grad: torch.Tensor) -> tuple:
        out = torch.empty_like(grad)
        fctx.comm.all_to_all(out, grad.contiguous(), group=fctx.group,
                             what=fctx.what + " backward")
        return out, None, None, None


def moe_layers(model: nn.Module) -> list[MoE]:
    return [blk.mlp for blk in model.blocks.values() if isinstance(blk.mlp, MoE)]


class ExpertParallel(Strategy):
    name = "ep_alltoall"
    label = "expert parallel by hand (all-to-all dispatch and combine)"
    unmodelled = Strategy.unmodelled + (
        "the capacity buffers' scatter and gather beyond the operator count",)

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        cfg, d = spec.cfg, ctx.world
        self.local = range(ctx.rank * cfg.experts // d, (ctx.rank + 1) * cfg.experts // d)
        self.model = build_model(cfg, ctx.device)
        for mlp in moe_layers(self.model):
            for j in range(cfg.experts):
                if j not in self.local:
                    del mlp.experts[str(j)]
            mlp.experts_fn = self._experts_of(mlp)
        self.shared = [(n, p) for n, p in self.model.named_parameters() if ".experts." not in n]
        self.opt = self.optimizer(list(self.model.parameters()))
        self._batch: Batch | None = None

    def _experts_of(self, mlp: MoE):
        d, El = self.ctx.world, len(self.local)

        def run(buf: torch.Tensor) -> torch.Tensor:
            if d == 1:  # every expert here: nothing to exchange
                return mlp.run_experts(buf)
            E, rows, h = buf.shape  # rows = b*C: this rank's sequences' slots per expert
            got = AllToAll.apply(buf, self.ctx.comm, None, "dispatch")  # (d*El, rows, h)
            x = got.view(d, El, rows, h).transpose(0, 1).reshape(El, d * rows, h)
            y = torch.stack([mlp.experts[str(j)](x[i]) for i, j in enumerate(self.local)])
            back = y.view(El, d, rows, h).transpose(0, 1).reshape(E, rows, h)
            return AllToAll.apply(back, self.ctx.comm, None, "combine")
        return run

    def train_step(self, batch: Batch) -> StepOut:
        ctx = self.ctx
        self._batch = batch
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)
        # backward of 1/d of the global mean: the experts' gradients (every rank's tokens)
        # come out right, and the replicas' gradients are summed
        loss = self.one_step(local, after_backward=self.sum_shared_grads, divide_by=ctx.world)
        return StepOut(loss, 1.0 / ctx.world)

    def sum_shared_grads(self) -> None:
        for _, p in self.shared if self.ctx.world > 1 else ():
            self.ctx.comm.all_reduce(p.grad)

    # -- gate
    def replicated(self):
        return [(None, self.shared)]

    # -- prediction
    def local_params(self) -> int:
        c, d = self.spec.cfg, self.ctx.world
        experts = moecost.expert_param_count(c.layers, c.hidden, c.experts)
        return c.param_count() - experts + experts // d

    def predicted_comm(self):
        c, e = self.spec.cfg, self.spec.e
        if self.ctx.world == 1:
            return {}
        b = self.spec.batch_size // self.ctx.world
        comm = cost.dp_comm([p.numel() for _, p in self.shared], e, "dp_naive",
                                 self.spec.cap_elems)
        comm["all_to_all"] = moecost.alltoall_bytes(c.layers, c.hidden, c.experts, c.top_k,
                                                    c.capacity_factor, c.seq_len, b, e)
        return comm

    def predicted_memory(self) -> dict:
        return self.peak_memory(P=self.local_params())

    # -- what the user sees
    def load(self) -> dict[str, Any]:
        """The last step's routing, summed over the ranks: per layer and expert."""
        c = self.spec.cfg
        counts = torch.stack([torch.stack(m.last_load) for m in moe_layers(self.model)])
        counts = self.ctx.sum_cpu(counts.detach().cpu().to(torch.int64)).tolist()
        routed = [layer[0] for layer in counts]
        kept = [layer[1] for layer in counts]
        dropped = [sum(r) - sum(k) for r, k in zip(routed, kept, strict=True)]
        total = c.top_k * self.spec.tokens * c.layers
        return {
            "experts": c.experts, "top_k": c.top_k, "capacity_factor": c.capacity_factor,
            "capacity_per_sequence": moecost.capacity(c.experts, c.top_k, c.capacity_factor,
                                                      c.seq_len),
            "experts_on_rank": list(self.local),
            "tokens_routed_per_layer": c.top_k * self.spec.tokens,
            "load_per_expert": routed, "kept_per_expert": kept,
            "dropped_per_layer": dropped, "dropped": sum(dropped),
            "drop_fraction": sum(dropped) / total if total else 0.0,
            "params_total": c.param_count(), "params_on_rank": self.local_params(),
            "flops_per_token_active": c.flops_per_token(),
            "expert_slot_flops_per_token": moecost.slot_flops_per_token(
                c.layers, c.hidden, c.seq_len, c.experts, c.top_k, c.capacity_factor),
        }

    def extra(self) -> dict[str, Any]:
        out = self.load()
        if self._batch is not None:
            out["dense_baseline"] = self.dense_baseline(self._batch)
        return out

    def dense_baseline(self, batch: Batch) -> dict[str, Any]:
        """The dense GPT of the same active FLOPs, data parallel like the replicas here,
        timed step for step beside this strategy (after the measurements)."""
        ctx, c = self.ctx, self.spec.cfg
        dense = DenseReplica(ctx, dataclasses.replace(self.spec, cfg=dataclasses.replace(
            c, experts=0)), c.top_k)
        moe_t, dense_t = [], []
        for i in range(BASELINE_STEPS + 1):  # the first of each is a warm-up
            for strat, times in ((self, moe_t), (dense, dense_t)):
                ctx.barrier()
                ctx.sync()
                t0 = time.perf_counter()
                strat.train_step(batch)
                ctx.sync()
                if i:
                    times.append(time.perf_counter() - t0)
        ctx.comm.reset()
        moe_s, dense_s = statistics.median(moe_t), statistics.median(dense_t)
        return {"what": dense.what, "params": dense.params(),
                "flops_per_token": dense.flops_per_token(),
                "step_time_s": dense_s, "moe_step_time_s": moe_s,
                "moe_over_dense": moe_s / dense_s if dense_s else None,
                "steps": BASELINE_STEPS}


class DenseReplica:
    """The dense baseline: the GPT with its MLPs k times as wide (the same weights' seed),
    each rank a replica on 1/d of the batch, gradients all-reduced per tensor."""

    def __init__(self, ctx, spec, k: int) -> None:
        self.ctx, self.spec, self.k = ctx, spec, k
        self.model = build_model(spec.cfg, ctx.device)
        h = spec.cfg.hidden
        if k > 1:
            with torch.random.fork_rng(devices=[]):  # CPU init, as build_model's
                torch.default_generator.manual_seed(spec.cfg.seed)
                for blk in self.model.blocks.values():
                    blk.mlp = Expert(h, 4 * k * h).to(ctx.device, spec.cfg.torch_dtype)
        self.what = ("the dense GPT, one MLP of 4h: a top-1 token's FLOPs" if k == 1 else
                     f"the GPT with MLPs of {4 * k}h: a top-{k} token's FLOPs")
        self.opt = make_optimizer(list(self.model.parameters()), spec.precision)

    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def flops_per_token(self) -> int:
        c = self.spec.cfg
        # an MLP of 4kh has 8kh^2 + (4k + 1)h parameters, (k - 1)(8h^2 + 4h) more
        return c.flops_per_token() + 6 * c.layers * (self.k - 1) * (8 * c.hidden ** 2
                                                                    + 4 * c.hidden)

    def train_step(self, batch: Batch) -> None:
        ctx = self.ctx
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)
        self.opt.zero_grad(set_to_none=True)
        loss = loss_fn(self.spec.cfg.kind)(self.model(local.inputs), local.targets)
        (loss / ctx.world).backward()
        for p in self.model.parameters() if ctx.world > 1 else ():
            ctx.comm.all_reduce(p.grad)
        self.opt.step()
