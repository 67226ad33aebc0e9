"""Rank 1 never joins the first collective; rank 0 must time out, not wait forever."""

import time

from jobs.lab import strategies
from jobs.lab.strategies.data_parallel import DataParallelNaive


class Hang(DataParallelNaive):
    def train_step(self, batch):
        if self.ctx.rank == 1:
            time.sleep(3600)
        return super().train_step(batch)


strategies.register("dp_naive", Hang)
