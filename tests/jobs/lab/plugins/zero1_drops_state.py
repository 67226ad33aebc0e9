"""A ZeRO-1 that throws its optimizer state away every step (and a ZeRO-2 whose shard
misses an element): the first passes a one-step gate with gradient error 1e-8, the
second a coverage check by name. Loaded through COMMONPLACE_LAB_PLUGIN."""

from jobs.lab import strategies
from jobs.lab.strategies.zero import Zero1, Zero2


class ForgetfulZero1(Zero1):
    def train_step(self, batch):
        for bucket in self.buckets:
            bucket["state"] = {}  # so every step starts SGD's momentum afresh
        return super().train_step(batch)


class HoleyZero2(Zero2):
    def grad_pieces(self):
        pieces = super().grad_pieces()
        if self.ctx.rank == 0:  # the first slice loses its last element, consistently
            first = pieces[0]
            select = first.select
            first.tensor = first.tensor[:-1]
            first.select = lambda full: select(full)[:-1]
        return pieces


strategies.register("zero1", ForgetfulZero1)
strategies.register("zero2", HoleyZero2)
