"""DP x TP with PyTorch's own pieces - the standard 2-D recipe (torchtitan's): a 2-D
DeviceMesh ("dp", "tp") from init_device_mesh (row-major: rank = dp_idx * tp + tp_idx,
as the hand-written mesh), parallelize_module with ColwiseParallel / RowwiseParallel on
the "tp" dimension (dtensor_tp.py's plan), then fully_shard (FSDP2) on the "dp" dimension:
every block a unit, the root (embeddings, final LayerNorm, head) the last. A block's
parameters are then DTensors on both dimensions (Shard(0) over dp, their tp placement
over tp). The collectives are PyTorch's: the census counts them from the dispatcher.

Bytes per rank and step: tp as tp_dtensor's (6 all-reduces of (B/d)*s*h*e per block);
dp as fsdp2's over the rank's tensor-parallel shards (fsdp_comm of their local shapes).

TorchDataPipeline (torch_dp_pp) is DP x PP the same way: init_device_mesh ("dp", "pp")
(rank = dp_idx * pp + pp_idx, the hand-written order with tp = 1), the model cut into
dp_pp's stages (pipeline_parallel.Stage), each stage wrapped in DistributedDataParallel
over mesh["dp"], driven by torch.distributed.pipelining's PipelineStage over mesh["pp"]
and Schedule1F1B. The schedule keeps DDP quiet (no_sync) until the step's last backward,
so the dp bytes are dp_pp's (one bucketed all-reduce of the stage's gradients) and the
pp bytes pipeline's formula; FSDP2 per stage would re-gather every micro-batch."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP

from jobs.lab.components.model import Batch, build_model, loss_fn, make_batch
from jobs.lab.components.optim import ADAMW_LR, BETAS, EPS, WEIGHT_DECAY
from jobs.lab.predict import calibration, cost, mesh
from jobs.lab.strategies.base import StepOut, Strategy
from jobs.lab.strategies.dtensor_tp import PLAN
from jobs.lab.strategies.mesh import DataPipeline, device_backend
from jobs.lab.strategies.pipeline_parallel import PipelineBase, Stage
from jobs.lab.strategies.torch_pipelining import Torch1F1B


def _local_shape(p: torch.Tensor) -> tuple[int, ...]:
    """The shape of a parameter's tensor-parallel shard (before FSDP2 shards it)."""
    return tuple(p.to_local().shape) if isinstance(p, DTensor) else tuple(p.shape)


class TorchDataTensor(Strategy):
    name = "torch_dp_tp"
    label = "torch DeviceMesh 2-D: fully_shard on dp, parallelize_module on tp"
    builtin = True
    instrumented = False
    hook_probe = True  # FSDP2's hooks and DTensor's redistributions on the 2-D mesh

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        params = spec.params
        self.deg = mesh.degrees(self.name, ctx.world, params.get("tp", 1), 1)
        self.at = mesh.coords(ctx.rank, self.deg)
        self.rpn = params.get("ranks_per_node", ctx.world)
        backend = device_backend(ctx)
        self.mesh = init_device_mesh(
            ctx.device.type, (self.deg["dp"], self.deg["tp"]), mesh_dim_names=("dp", "tp"),
            backend_override={"dp": backend, "tp": backend} if backend else None)
        mixed = self.precision == "bf16_adamw"
        self.model = build_model(spec.cfg, ctx.device).float()
        # the tensor-parallel shards FSDP2 will cut: (blocks, root) local shapes
        for blk in self.model.blocks.values():
            parallelize_module(blk, self.mesh["tp"], PLAN)
        blocks = [[_local_shape(p) for p in blk.parameters()]
                  for blk in self.model.blocks.values()]
        inside = {id(p) for blk in self.model.blocks.values() for p in blk.parameters()}
        self.units = blocks + [[_local_shape(p) for p in self.model.parameters()
                                if id(p) not in inside]]
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if mixed else MixedPrecisionPolicy()
        for blk in self.model.blocks.values():
            fully_shard(blk, mesh=self.mesh["dp"], mp_policy=policy)
        fully_shard(self.model, mesh=self.mesh["dp"], mp_policy=policy)
        ps = list(self.model.parameters())
        self.opt = torch.optim.AdamW(ps, lr=ADAMW_LR, betas=BETAS, eps=EPS,
                                     weight_decay=WEIGHT_DECAY) if mixed else self.optimizer(ps)

    def train_step(self, batch: Batch) -> StepOut:
        local = batch.split(self.deg["dp"])[self.at["dp"]].to(self.ctx.device)
        return StepOut(self.one_step(local), 1.0 / self.ctx.world)

    # -- gate: Strategy's pieces, every parameter gathered whole (DTensor.full_tensor, over
    # both dimensions)

    # -- prediction
    def local_tokens(self) -> int:
        return self.spec.tokens // self.deg["dp"]

    def _bytes(self) -> tuple[int, int]:
        """(all-gather, reduce-scatter) bytes per element, as fsdp.py's."""
        return (2, 4) if self.precision == "bf16_adamw" else (4, 4)

    def per_dim(self) -> dict[str, dict]:
        c, d = self.spec.cfg, self.deg["dp"]
        e_param, e_reduce = self._bytes()
        fsdp = cost.fsdp_comm(self.units, d, e_param, e_reduce,
                                   regathered=[True] * (len(self.units) - 1) + [False]) \
            if d > 1 else None
        return mesh.dim_bytes(self.name, self.ctx.rank, self.deg, L=c.layers,
                                    B=self.spec.batch_size, s=c.seq_len, h=c.hidden,
                                    e=self.spec.e, m=1, numels=[], cap_elems=1, fsdp=fsdp)

    def predicted_comm(self):
        return mesh.merged(self.per_dim())

    def priced_comm(self, cal: calibration.Calibration) -> float:
        """Each dimension's bytes over its own group's link (mesh.py's MeshMixin too)."""
        return sum(cal.comm(table, self.deg[dim]) for dim, table in self.per_dim().items()
                   if table and dim in self.deg)

    def predicted_memory(self) -> dict:
        """fsdp.py's formula over the rank's tensor-parallel share: the sharded state
        (its P/d), the root unsharded from its forward to the end of backward, activations
        split t ways, of the dp shard's tokens. The peak is the loss's backward, before
        any block is unsharded again (fsdp.py adds two blocks there; measured here, with
        the blocks' tensor-parallel shards, they are not yet: 0.88 of the peak with them,
        0.96-0.98 without)."""
        c, d, t = self.spec.cfg, self.deg["dp"], self.deg["tp"]
        e_param, e_reduce = self._bytes()
        sizes = [cost.fsdp_padded(u, d) for u in self.units]
        root = sizes[-1]
        split, rep = cost.tp_split_params(c.layers, c.hidden, c.seq_len, c.vocab)
        return self.peak_memory(
            P=(rep + split // t) / d, t=t,
            start={"root unsharded": root * e_param},
            end={"root unsharded": root * e_param, "root gradients": root * (e_param + e_reduce)})

    def extra(self) -> dict[str, Any]:
        dims = mesh.breakdown(self.per_dim(), self.ctx.rank, self.deg, self.rpn)
        return {"mesh": {**self.deg, "coords": self.at, "ranks_per_node": self.rpn,
                         "order": "init_device_mesh (dp, tp): rank = dp_idx * tp + tp_idx",
                         "dims": dims}}


class TorchDataPipeline(Torch1F1B):
    name = "torch_dp_pp"
    label = "torch DeviceMesh 2-D: DDP on dp, pipelining Schedule1F1B on pp"
    unmodelled = Torch1F1B.unmodelled + ("DDP's reducer (hooks, bucket copies)",)

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)  # not TorchPipelineBase's: the mesh's groups
        cfg, params = spec.cfg, spec.params
        self.deg = mesh.degrees(self.name, ctx.world, 1, params.get("pp", 1))
        self.at = mesh.coords(ctx.rank, self.deg)
        self.rpn = params.get("ranks_per_node", ctx.world)
        backend = device_backend(ctx)
        self.mesh = init_device_mesh(
            ctx.device.type, (self.deg["dp"], self.deg["pp"]), mesh_dim_names=("dp", "pp"),
            backend_override={"dp": backend, "pp": backend} if backend else None)
        self.p, self.rank, self.m = self.deg["pp"], self.at["pp"], spec.micro_batches
        self.mb_rows = spec.batch_size // (self.deg["dp"] * self.m)
        self.first, self.last = self.rank == 0, self.rank == self.p - 1
        stage = Stage(build_model(cfg, ctx.device), self.rank, self.p)
        self.dp_group = self.mesh["dp"].get_group() if self.deg["dp"] > 1 else None
        if self.dp_group is not None:
            self.model = DDP(stage, device_ids=[ctx.device] if ctx.is_cuda else None,
                             bucket_cap_mb=spec.bucket_cap_mb, process_group=self.dp_group)
            self.name_prefix = "module.model."
        else:
            self.model = stage
        self.opt = self.optimizer(list(self.model.parameters()))
        # static shapes, as torch_pipelining.py's (no metadata round)
        T, h = cfg.seq_len, cfg.hidden
        act = torch.zeros(self.mb_rows, T, h, dtype=cfg.torch_dtype, device=ctx.device)
        example_in = make_batch(cfg, self.mb_rows).inputs.to(ctx.device) if self.first \
            else act.clone().requires_grad_()
        width = cfg.vocab if cfg.kind == "gpt" else h
        example_out = torch.zeros(self.mb_rows, T, width, dtype=cfg.torch_dtype,
                                  device=ctx.device).requires_grad_() if self.last else \
            act.clone().requires_grad_()
        pipe_stage = PipelineStage(self.model, self.rank, self.p, ctx.device,
                                   input_args=example_in, output_args=example_out,
                                   group=self.mesh["pp"].get_group())
        self.schedule = Schedule1F1B(pipe_stage, self.m, loss_fn=loss_fn(cfg.kind))
        self.max_in_flight = None
        self.first_mb_saved_bytes = None

    def train_step(self, batch: Batch) -> StepOut:
        local = batch.split(self.deg["dp"])[self.at["dp"]]
        out = super().train_step(local)
        return StepOut(out.loss, 1.0 / self.deg["dp"] if self.last else 0.0)

    def replicated(self):
        """Every parameter of the stage is replicated over its dp group."""
        if self.dp_group is None:
            return []
        named = [(n[len(self.name_prefix):], p) for n, p in self.model.named_parameters()]
        return [(self.dp_group, named)]

    def micro_batches(self) -> int:
        return self.m

    def numels(self) -> list[int]:
        return [p.numel() for p in self.model.parameters()]

    def per_dim(self) -> dict[str, dict]:
        c = self.spec.cfg
        return mesh.dim_bytes(self.name, self.ctx.rank, self.deg, L=c.layers,
                                    B=self.spec.batch_size, s=c.seq_len, h=c.hidden,
                                    e=self.spec.e, m=self.m, numels=self.numels(),
                                    cap_elems=self.spec.cap_elems)

    def predicted_comm(self):
        return mesh.merged(self.per_dim())

    def predicted_memory(self) -> dict:
        """dp_pp's stage formula (DDP's buckets: a second copy of the stage's gradients)
        plus what PipelineStage keeps between steps, as torch_pipelining.py's."""
        mem = DataPipeline.predicted_memory(self)
        c, n, e = self.spec.cfg, self.local_tokens(), self.spec.e
        kept = {"receive buffers": self.m * self.mb_bytes() * ((not self.first) + (not self.last)),
                "outputs kept": self.m * n * (c.vocab if c.kind == "gpt" else c.hidden) * e
                if self.last else 0}
        return {**mem, "held": {**mem["held"], **kept}, "total": mem["total"] + sum(kept.values())}

    def predict(self, cal: calibration.Calibration, compute: list[dict]) -> dict:
        """The pipeline formula over the stages of dp index 0, then DDP's all-reduce."""
        ranks = [mesh.rank_of(0, s, 0, self.deg) for s in range(self.p)]
        pred = PipelineBase.predict(self, cal, [compute[r] for r in ranks])
        dp = self.per_dim()["dp"]
        rest = {k: v for k, v in pred.items()
                if k not in ("step_time_s", "terms_s", "dominant", "formula")}
        return cost.prediction({**pred["terms_s"],
                                     "dp_comm": cal.comm(dp, self.deg["dp"]) if dp else 0.0},
                                    pred["formula"] + " + dp all-reduce", **rest)

    def extra(self) -> dict[str, Any]:
        dims = mesh.breakdown(self.per_dim(), self.ctx.rank, self.deg, self.rpn)
        return {**super().extra(),
                "mesh": {**self.deg, "coords": self.at, "ranks_per_node": self.rpn,
                         "order": "init_device_mesh (dp, pp): rank = dp_idx * pp + pp_idx",
                         "dims": dims}}
