"""A ZeRO-3 that never frees a gathered unit: every number is right and every byte
predicted is sent, but each rank ends up holding the whole model - only the memory check
catches it (loaded through COMMONPLACE_LAB_PLUGIN)."""

from jobs.lab import strategies
from jobs.lab.strategies.zero3 import Zero3


class NeverFreesZero3(Zero3):
    def _free(self, unit):
        pass


strategies.register("zero3", NeverFreesZero3)
