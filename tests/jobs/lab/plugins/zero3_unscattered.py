"""A ZeRO-3 that forgets to reduce-scatter block 0's gradients: each rank keeps the slice
of its own local gradient as if it were the reduced one. No error, no hang - the gate
catches it (loaded through COMMONPLACE_LAB_PLUGIN)."""

import torch

from jobs.lab import strategies
from jobs.lab.strategies.zero3 import Zero3


class _Done:
    def wait(self) -> None:
        pass


class UnscatteredZero3(Zero3):
    def _reduce_scatter(self, bucket, index, async_op):
        if index != 1:  # unit 1 is block 0
            return super()._reduce_scatter(bucket, index, async_op)
        local = torch.zeros_like(bucket["flat"])
        for p, off, n in bucket["layout"]:
            local[off:off + n].copy_(p.grad.reshape(-1))
        bucket["grad"].copy_(local[bucket["lo"]:bucket["hi"]])
        bucket["work"] = _Done()
        return None


strategies.register("zero3", UnscatteredZero3)
