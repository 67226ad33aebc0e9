"""Meshes by hand: data parallelism combined with tensor and pipeline parallelism.

The world is a grid dp x pp x tp, tp innermost (jobs/lab/predict/mesh.py: rank =
((dp_idx * pp) + pp_idx) * tp + tp_idx). Each dimension has its own process groups,
created by every rank in the same order (all tp groups, then all dp groups, then the
stage groups the gate compares replicas over):

    tp  Megatron's f/g (tensor_parallel.py) over the tp group: 4 all-reduces per block
    pp  a pipeline stage per pp index (pipeline_parallel.py's Stage and 1F1B schedule),
        activations sent to the same tp index of the neighbouring stage
    dp  the batch split d ways; gradients all-reduced over the dp group in buckets
        (cost.plan_buckets), each launched from a post-accumulate-grad hook as soon
        as its last gradient of the step's last backward exists, then averaged

DataTensor is DP x TP, DataPipeline DP x PP, DataPipelineTensor DP x PP x TP. A degree
of 1 drops its dimension (no group, no traffic).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from jobs.lab.components import context
from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.predict import calibration, cost, mesh
from jobs.lab.strategies.base import Piece, StepOut, Strategy
from jobs.lab.strategies.data_parallel import GradBuckets
from jobs.lab.strategies.pipeline_parallel import OneFOneB, Stage
from jobs.lab.strategies.pp_communications import StageComm
from jobs.lab.strategies.tensor_parallel import (
    MegatronTP,
    apply_tensor_parallel,
    tp_pieces,
    tp_shards,
)


def device_backend(ctx: Any) -> str | None:
    """The backend of new groups that carry ctx.device's tensors (None: the default's)."""
    return None if ctx.device.type in context.devices_served(ctx.backend) \
        else context.NATIVE[ctx.device.type]


def mesh_groups(ctx: Any, deg: dict[str, int]) -> dict[str, Any]:
    """This rank's group in each dimension of degree > 1 ("stage": the ranks of its
    pipeline stage, dp x tp of them). Every rank creates every group, in one order."""
    backend, mine = device_backend(ctx), {}
    layout = {dim: mesh.groups(dim, deg) for dim in ("tp", "dp") if deg[dim] > 1}
    if deg["pp"] > 1 and deg["dp"] * deg["tp"] > 1:
        layout["stage"] = [[r for r in range(ctx.world)
                            if mesh.coords(r, deg)["pp"] == s] for s in range(deg["pp"])]
    for dim, all_ranks in layout.items():
        for ranks in all_ranks:
            g = dist.new_group(ranks, backend=backend)
            if ctx.rank in ranks:
                mine[dim] = g
    return mine


class DimComm:
    """ctx.comm bound to one dimension's group: what f/g and the buckets call. Every call
    is counted by ctx.comm (per kind, as for every hand-written strategy) and here per
    dimension, and tagged dim=... on the timeline."""

    def __init__(self, comm: Any, group: Any, dim: str, counts: dict[str, int]) -> None:
        self.comm, self.group, self.dim, self.counts = comm, group, dim, counts

    def all_reduce(self, t: torch.Tensor, async_op: bool = False, **fields: Any):
        self.counts[self.dim] = self.counts.get(self.dim, 0) + t.numel() * t.element_size()
        return self.comm.all_reduce(t, group=self.group, async_op=async_op, dim=self.dim,
                                    **fields)


class MeshMixin:
    """The grid, the groups and the per-dimension bookkeeping shared by the three."""

    ctx: Any
    spec: Any
    model: Any

    def setup_mesh(self) -> None:
        ctx, params = self.ctx, self.spec.params
        self.deg = mesh.degrees(self.name, ctx.world, params.get("tp", 1),
                                      params.get("pp", 1))
        self.at = mesh.coords(ctx.rank, self.deg)
        self.rpn = params.get("ranks_per_node", ctx.world)
        self.groups = mesh_groups(ctx, self.deg)
        self.dim_counts: dict[str, int] = {}
        self.tp_comm = DimComm(ctx.comm, self.groups.get("tp"), "tp", self.dim_counts)
        self.dp_comm = DimComm(ctx.comm, self.groups.get("dp"), "dp", self.dim_counts)
        self.buckets: GradBuckets | None = None

    def make_buckets(self) -> None:
        if self.deg["dp"] > 1:
            self.buckets = GradBuckets(list(self.model.parameters()), self.spec.cap_elems,
                                       self.dp_comm, self.deg["dp"])

    def local_batch(self, batch: Batch) -> Batch:
        return batch.split(self.deg["dp"])[self.at["dp"]].to(self.ctx.device)

    def split_shards(self) -> dict[str, tuple[int, int, int]]:
        """Parameter name (the reference's) -> its tensor-parallel slice."""
        return tp_shards(self.model, self.name_prefix)

    def _pieces(self, what: str) -> list[Piece]:
        return tp_pieces(self, what)

    def grad_pieces(self) -> list[Piece]:
        return self._pieces("grad")

    def param_pieces(self) -> list[Piece]:
        return self._pieces("param")

    def state_pieces(self) -> list[Piece]:
        return self._pieces("state")

    def replicated(self):
        """TP slices are replicated over the dp group; the rest over every rank of the
        stage (dp x tp ranks; all of them without a pipeline)."""
        shards = self.split_shards()
        named = [(n[len(self.name_prefix):] if self.name_prefix else n, p)
                 for n, p in self.model.named_parameters()]
        split = [(n, p) for n, p in named if n in shards]
        rest = [(n, p) for n, p in named if n not in shards]
        out = []
        if split and "dp" in self.groups:
            out.append((self.groups["dp"], split))
        if self.deg["pp"] == 1:
            out.append((None, rest))
        elif "stage" in self.groups:
            out.append((self.groups["stage"], rest))
        return out

    def numels(self) -> list[int]:
        return [p.numel() for p in self.model.parameters()]

    def per_dim(self) -> dict[str, dict]:
        c = self.spec.cfg
        return mesh.dim_bytes(self.name, self.ctx.rank, self.deg, L=c.layers,
                                    B=self.spec.batch_size, s=c.seq_len, h=c.hidden,
                                    e=self.spec.e, m=self.micro_batches(),
                                    numels=self.numels(), cap_elems=self.spec.cap_elems)

    def predicted_comm(self):
        return mesh.merged(self.per_dim())

    def priced_comm(self, cal: calibration.Calibration) -> float:
        """Each dimension's bytes over its own group's link: a 2-rank tp all-reduce is
        not priced as an 8-rank one."""
        return sum(cal.comm(table, self.deg[dim]) for dim, table in self.per_dim().items()
                   if table and dim in self.deg)

    def extra(self) -> dict[str, Any]:
        dims = mesh.breakdown(self.per_dim(), self.ctx.rank, self.deg, self.rpn)
        for dim, row in dims.items():
            row["measured_bytes"] = self.dim_counts.get(dim, 0)
        return {"mesh": {**self.deg, "coords": self.at, "ranks_per_node": self.rpn,
                         "order": "rank = ((dp_idx * pp) + pp_idx) * tp + tp_idx",
                         "dims": dims}}


class DataTensor(MeshMixin, MegatronTP):
    name = "dp_tp"
    label = "DP x TP by hand (tp groups inside, dp groups across)"

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)
        self.setup_mesh()
        model = build_model(spec.cfg, ctx.device)
        self.model = apply_tensor_parallel(model, self.at["tp"], self.deg["tp"],
                                           self.tp_comm) if self.deg["tp"] > 1 else model
        self.opt = self.optimizer(list(self.model.parameters()))
        self.make_buckets()

    def micro_batches(self) -> int:
        return 1

    def train_step(self, batch: Batch) -> StepOut:
        self.dim_counts.clear()
        if self.buckets:
            self.buckets.sync = True  # read by the gradient hooks, in backward
        loss = self.one_step(self.local_batch(batch),
                             after_backward=self.buckets.finish if self.buckets else None)
        # every rank of a tp group has its dp shard's whole loss
        return StepOut(loss, 1.0 / self.ctx.world)

    def local_tokens(self) -> int:
        return self.spec.tokens // self.deg["dp"]

    def predicted_memory(self) -> dict:
        split, rep = self._split()
        P = rep + split // self.deg["tp"]
        buffers = {"bucket buffers": P * self.spec.e} if self.deg["dp"] > 1 else None
        return self.peak_memory(P=P, t=self.deg["tp"], buffers=buffers)

    def model_state(self) -> dict[str, int]:
        state = super().model_state()
        if self.buckets:
            state["comm_buffers"] = self.buckets.nbytes()
        return state


class MeshStageComm(StageComm):
    """A stage's point-to-point operations with stage indices mapped to the global ranks
    of the same dp and tp index (``peers``), each message counted under "pp"."""

    def __init__(self, ctx, shape, dtype, stage: int, stages: int, peers: list[int],
                 counts: dict[str, int]) -> None:
        super().__init__(ctx, shape, dtype)
        self.rank, self.p, self.peers, self.counts = stage, stages, peers, counts
        self.first, self.last = stage == 0, stage == stages - 1

    def _count(self, t: torch.Tensor, times: int = 1) -> None:
        self.counts["pp"] = self.counts.get("pp", 0) + times * t.numel() * t.element_size()

    def _send(self, t, peer, **fields) -> None:
        self._count(t)
        super()._send(t, self.peers[peer], dim="pp", **fields)

    def _recv(self, peer, **fields):
        t = super()._recv(self.peers[peer], dim="pp", **fields)
        self._count(t)
        return t

    def _exchange(self, t, peer, **fields):
        got = super()._exchange(t, self.peers[peer], dim="pp", **fields)
        self._count(got, 2)
        return got


class DataPipeline(MeshMixin, OneFOneB):
    name = "dp_pp"
    label = "DP x PP by hand (1F1B stages, dp groups per stage)"

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)
        self.setup_mesh()
        cfg, deg = spec.cfg, self.deg
        self.p, self.rank = deg["pp"], self.at["pp"]
        self.m = self.micro_batches()
        self.model = Stage(build_model(cfg, ctx.device), self.rank, self.p)
        if deg["tp"] > 1:
            apply_tensor_parallel(self.model.model, self.at["tp"], deg["tp"], self.tp_comm)
        self.opt = self.optimizer(list(self.model.parameters()))
        self.mb_rows = spec.batch_size // (deg["dp"] * self.m)
        peers = [mesh.rank_of(self.at["dp"], s, self.at["tp"], deg)
                 for s in range(self.p)]
        self.io = MeshStageComm(ctx, (self.mb_rows, cfg.seq_len, cfg.hidden),
                                cfg.torch_dtype, self.rank, self.p, peers, self.dim_counts)
        self.loss = loss_fn(cfg.kind)
        self.max_in_flight = 0
        self.first_mb_saved_bytes: int | None = None
        self.make_buckets()

    def backward_mb(self, i: int, grad_out):
        if self.buckets:
            self.buckets.sync = i == self.m - 1  # the step's last backward on this stage
        return super().backward_mb(i, grad_out)

    def train_step(self, batch: Batch) -> StepOut:
        mbs = self.local_batch(batch).split(self.m)
        self.dim_counts.clear()
        self.opt.zero_grad(set_to_none=True)
        self.in_flight, self.losses = [], []
        self.run_schedule(mbs)
        self.io.flush()
        if self.buckets:
            self.buckets.finish()
        with self.ctx.timeline.span("optimizer"):
            self.opt.step()
        share = 1.0 / (self.deg["dp"] * self.deg["tp"])
        return StepOut(sum(self.losses), share if self.io.last else 0.0)

    def model_state(self) -> dict[str, int]:
        state = super().model_state()
        if self.buckets:
            state["comm_buffers"] = self.buckets.nbytes()
        return state

    def predicted_memory(self) -> dict:
        """pipeline_parallel.py's stage formula, with the stage's tensor-parallel share of
        the parameters and activations and the dp buckets held throughout."""
        c, t = self.spec.cfg, self.deg["tp"]
        first, last = self.rank == 0, self.rank == self.p - 1
        k, m, mb = self.expected_in_flight(), self.m, self.mb_bytes()
        fwd, bwd = (0 if last else mb), (0 if first else mb)
        again = k if m > k else m - 1
        P = cost.rank_params(c.layers, c.hidden, c.seq_len, c.vocab, t=t, p=self.p,
                                  rank=self.rank)
        buffers = {"bucket buffers": P * self.spec.e} if self.deg["dp"] > 1 else None
        return self.peak_memory(
            P=P, t=t, in_flight=k, first=first, last=last, buffers=buffers,
            start={"sends held": k * fwd},
            later={"sends held": min(m, again + 1) * fwd + bwd},
            end={"sends held": m * (fwd + bwd)})

    def predict(self, cal: calibration.Calibration, compute: list[dict]) -> dict:
        """The pipeline formula over the stages of dp index 0, tp index 0, each slot
        lengthened by its tensor-parallel all-reduces; then the dp all-reduce, exposed."""
        def terms(c: dict, per_mb: bool) -> dict:
            names = [k for k in c if (k in ("forward", "backward")) == per_mb]
            return {t: sum(c[k][t] for k in names) for t in cost.COMPUTE_TERMS}

        c, deg = self.spec.cfg, self.deg
        ranks = [mesh.rank_of(0, s, 0, deg) for s in range(self.p)]
        tables = [mesh.dim_bytes(self.name, r, deg, L=c.layers,
                                       B=self.spec.batch_size, s=c.seq_len, h=c.hidden,
                                       e=self.spec.e, m=self.m, numels=self.numels(),
                                       cap_elems=self.spec.cap_elems) for r in ranks]
        inside = [{"tp_comm": cal.comm(t["tp"], deg["tp"])} if t["tp"] else {}
                  for t in tables]
        t_p2p = cal.coll("send_recv", self.mb_bytes()) if self.p > 1 else 0.0
        pred = cost.predict_pipeline([terms(compute[r], True) for r in ranks],
                                          [terms(compute[r], False) for r in ranks],
                                          self.m, t_p2p, inside)
        dp_s = max(cal.comm(t["dp"], deg["dp"]) if t["dp"] else 0.0 for t in tables)
        rest = {k: v for k, v in pred.items()
                if k not in ("step_time_s", "terms_s", "dominant", "formula")}
        return cost.prediction({**pred["terms_s"], "dp_comm": dp_s},
                                    pred["formula"] + " + dp all-reduce", **rest)

    def extra(self) -> dict[str, Any]:
        return {**OneFOneB.extra(self), **MeshMixin.extra(self)}


class DataPipelineTensor(DataPipeline):
    name = "dp_pp_tp"
    label = "DP x PP x TP by hand (3D: tp inside a stage, stages, dp across)"
