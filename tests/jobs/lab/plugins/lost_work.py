"""Strategies that lose part of the work between ranks - what the gate must catch on the
numbers, whatever schedule or shapes they keep:

- a Megatron TP whose MLP skips f, so its backward never all-reduces the gradient of the
  MLP's input (every rank goes on with its own partial sum);
- a GPipe that drops the last micro-batch (and says its schedule has one fewer);
- a naive data parallel whose rank 1 sends zeros into the all-reduce.

Loaded into the workers through COMMONPLACE_LAB_PLUGIN."""

import torch.nn.functional as F

from jobs.lab import strategies
from jobs.lab.strategies.data_parallel import DataParallelNaive
from jobs.lab.strategies.pipeline_parallel import GPipe
from jobs.lab.strategies.tensor_parallel import MegatronTP, ParallelMLP


class MLPWithoutF(ParallelMLP):
    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class TPSkippingAnAllReduce(MegatronTP):
    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        for blk in self.model.blocks.values():
            blk.mlp.__class__ = MLPWithoutF


class GPipeDroppingAMicroBatch(GPipe):
    def run_schedule(self, mbs) -> None:
        for i in range(self.m - 1):
            self.io.send_forward(self.forward_mb(i, self.input_of(i, mbs), mbs), i)
        for i in range(self.m - 1):
            self.io.send_backward(self.backward_mb(i, self.io.recv_backward(i)), i)

    def expected_order(self):
        return [("forward", i) for i in range(self.m - 1)] + \
            [("backward", i) for i in range(self.m - 1)]


class RankOneSendsZeros(DataParallelNaive):
    def sync_gradients(self) -> None:
        for p in self.model.parameters():
            if self.ctx.rank == 1:
                p.grad.zero_()
            self.ctx.comm.all_reduce(p.grad)
            p.grad.div_(self.ctx.world)


strategies.register("tp_megatron", TPSkippingAnAllReduce)
strategies.register("gpipe", GPipeDroppingAMicroBatch)
strategies.register("dp_naive", RankOneSendsZeros)
