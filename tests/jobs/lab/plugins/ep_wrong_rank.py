"""A deliberately broken expert-parallel strategy: its dispatch sends every rank's
tokens one rank too far (rank q's experts' rows go to rank q+1), and its combine brings
the outputs back from there - the bytes are right, the experts are the wrong ones.
Loaded into the workers through COMMONPLACE_LAB_PLUGIN."""

import torch

from jobs.lab import strategies
from jobs.lab.strategies.experts import ExpertParallel


class WrongRankDispatch(ExpertParallel):
    def _experts_of(self, mlp):
        right = super()._experts_of(mlp)
        shift = len(self.local)  # one rank's experts

        def run(buf: torch.Tensor) -> torch.Tensor:
            return right(buf.roll(shift, 0)).roll(-shift, 0)
        return run


strategies.register("ep_alltoall", WrongRankDispatch)
