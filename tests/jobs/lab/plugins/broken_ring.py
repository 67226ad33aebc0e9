"""Deliberately broken ring attention, loaded into the workers through
COMMONPLACE_LAB_PLUGIN; COMMONPLACE_TEST_BROKEN_RING says how it is broken:
"mask" - the diagonal block attended whole (a query sees the later tokens of its chunk);
"rotation" - the ring never turns (every step attends the rank's own K,V block again)."""

import os

from jobs.lab import strategies
from jobs.lab.strategies.context_parallel import RingAttention, RingSelfAttention

HOW = os.environ.get("COMMONPLACE_TEST_BROKEN_RING", "mask")


class NoDiagonalMask(RingSelfAttention):
    @staticmethod
    def mask(key_chunk, query_chunk, causal):
        return None


class NoRotation(RingSelfAttention):
    def rotate(self, kv):
        return kv


class BrokenRing(RingAttention):
    attention = NoDiagonalMask if HOW == "mask" else NoRotation


strategies.register("cp_ring", BrokenRing)
