"""PyTorch's FSDP2 (fully_shard): ZeRO-3, parameters sharded too, all-gathered per
block before its forward and again before its backward, gradients reduce-scattered.
One unit per block plus the root (embeddings, final LayerNorm, head), which torch keeps
unsharded from its forward to the end of backward (it would be gathered again at once).
Its collectives are PyTorch's own: the census counts them from the dispatcher.

bf16_adamw is FSDP2's own mixed precision: fp32 sharded parameters (the master weights)
and AdamW on them, bf16 all-gathers and compute, gradients reduce-scattered in fp32
(``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``, torchtitan's default)."""

from __future__ import annotations

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from jobs.lab.components.model import Batch, build_model
from jobs.lab.components.optim import ADAMW_LR, BETAS, EPS, WEIGHT_DECAY
from jobs.lab.predict import calibration, cost
from jobs.lab.strategies.base import StepOut, Strategy


class TorchFSDP2(Strategy):
    name = "fsdp2"
    label = "torch FSDP2 fully_shard (ZeRO-3)"
    builtin = True
    instrumented = False
    hook_probe = True  # its hooks: unshard, reshard, copy-in/out, reduce-scatter scheduling

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        mesh = ctx.mesh()
        mixed = self.precision == "bf16_adamw"
        # the master weights start where the reference's do: at the bf16-rounded init
        self.model = build_model(spec.cfg, ctx.device).float()
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if mixed else MixedPrecisionPolicy()
        for blk in self.model.blocks.values():
            fully_shard(blk, mesh=mesh, mp_policy=policy)
        fully_shard(self.model, mesh=mesh, mp_policy=policy)
        params = list(self.model.parameters())
        self.opt = torch.optim.AdamW(params, lr=ADAMW_LR, betas=BETAS, eps=EPS,
                                     weight_decay=WEIGHT_DECAY) if mixed else \
            self.optimizer(params)

    def train_step(self, batch: Batch) -> StepOut:
        ctx = self.ctx
        return StepOut(self.one_step(batch.split(ctx.world)[ctx.rank].to(ctx.device)),
                       1.0 / ctx.world)

    def _units(self) -> tuple[list[list[tuple[int, ...]]], list[int]]:
        """Parameter shapes of each unit (the blocks, then the root), and their sizes."""
        blocks = [[tuple(p.shape) for p in blk.parameters()]
                  for blk in self.model.blocks.values()]
        inside = {id(p) for blk in self.model.blocks.values() for p in blk.parameters()}
        root = [tuple(p.shape) for p in self.model.parameters() if id(p) not in inside]
        return blocks + [root], [cost.fsdp_padded(u, self.ctx.world)
                                 for u in blocks + [root]]

    def _bytes(self) -> tuple[int, int]:
        """(all-gather, reduce-scatter) bytes per element."""
        return (2, 4) if self.precision == "bf16_adamw" else (4, 4)

    def predicted_comm(self):
        if self.ctx.world == 1:
            return {}  # one rank: FSDP2 gathers and scatters nothing
        units, _ = self._units()
        e_param, e_reduce = self._bytes()
        return cost.fsdp_comm(units, self.ctx.world, e_param, e_reduce,
                                   regathered=[True] * (len(units) - 1) + [False])

    def overlap_s(self, cal: calibration.Calibration, compute: list[dict]) -> float:
        """On a GPU FSDP2 prefetches the next unit's all-gather while this one computes,
        and reduce-scatters the last one's gradients while the next computes: all but the
        first gather and the last reduce-scatter can hide (on CPU: nothing, as for DP)."""
        if not self.ctx.is_cuda or self.ctx.world == 1:
            return 0.0
        comm = self.predicted_comm()
        first = comm["all_gather"]["bytes"] / comm["all_gather"]["count"]
        busy = max(sum(sum(ph.values()) for ph in c.values()) for c in compute)
        return max(0.0, min(busy, cal.comm(comm) - 2 * cal.coll("all_gather", first)))

    def predicted_memory(self) -> dict:
        """Sharded state (16P/d, or 12P/d), and what is unsharded: the root from its
        forward to the end of backward, a block (and the next, prefetched) in backward;
        the root's full gradients until its reduce-scatter, the step's last."""
        _, sizes = self._units()
        e_param, e_reduce = self._bytes()
        block, root = max(sizes[:-1], default=0), sizes[-1]
        return self.peak_memory(
            stage=3,
            start={"root unsharded": root * e_param, "2 blocks unsharded": 2 * block * e_param},
            end={"root unsharded": root * e_param, "root gradients": root * (e_param + e_reduce)})
