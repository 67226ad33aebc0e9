"""PyTorch's tensor parallelism: DTensor ColwiseParallel / RowwiseParallel on the
same layers the hand-written version splits. Parameters become DTensors; the gate
compares their full_tensor() with the reference. DTensor issues its collectives
itself (the census counts them from the dispatcher): 6 all-reduces per layer, not
Megatron's 4, because each column-parallel linear (q, k, v, fc) turns its input
into a replicated DTensor of its own, whose gradient it all-reduces in backward."""

from __future__ import annotations

from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

from jobs.lab.components.model import build_model
from jobs.lab.strategies.base import Piece, Strategy, local_pieces
from jobs.lab.strategies.tensor_parallel import MegatronTP

PLAN = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(), "mlp.fc": ColwiseParallel(),
        "mlp.proj": RowwiseParallel()}


class DTensorTP(MegatronTP):
    name = "tp_dtensor"
    label = "torch DTensor ColwiseParallel/RowwiseParallel"
    builtin = True
    instrumented = False
    hook_probe = True  # DTensor's module hooks and redistributions around each linear

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)
        self.mesh = ctx.mesh()
        self.model = build_model(spec.cfg, ctx.device)
        for blk in self.model.blocks.values():
            parallelize_module(blk, self.mesh, PLAN)
        self.opt = self.optimizer(list(self.model.parameters()))

    all_reduces_per_layer = 6  # g twice forward; q, k, v and fc's input gradients

    def predicted_comm(self):
        # on a one-rank mesh a partial sum is already whole: DTensor sends nothing
        return super().predicted_comm() if self.ctx.world > 1 else {}

    def _pieces(self, what: str) -> list[Piece]:
        return local_pieces(self.model, what, opt=self.opt, precision=self.precision)

    def replicated(self):
        return [(None, [(n, p) for n, p in self.model.named_parameters()
                        if not isinstance(p, DTensor)])]
