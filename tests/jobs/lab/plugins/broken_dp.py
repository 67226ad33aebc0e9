"""A deliberately broken data-parallel strategy: it forgets the all_reduce of one
gradient. Loaded into the workers through COMMONPLACE_LAB_PLUGIN."""

from jobs.lab import strategies
from jobs.lab.strategies.data_parallel import DataParallelNaive

SKIPPED = "blocks.0.mlp.fc.weight"


class MissingAllReduce(DataParallelNaive):
    def sync_gradients(self) -> None:
        for name, p in self.model.named_parameters():
            if name != SKIPPED:
                self.ctx.comm.all_reduce(p.grad)
            p.grad.div_(self.ctx.world)


strategies.register("dp_naive", MissingAllReduce)
