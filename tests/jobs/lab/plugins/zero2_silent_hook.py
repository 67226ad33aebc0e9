"""A ZeRO-2 whose first bucket's hook never fires: without the check it would apply the
previous step's gradient slice again."""

from jobs.lab import strategies
from jobs.lab.strategies.zero import Zero2


class SilentHookZero2(Zero2):
    def _make_hook(self, index):
        hook = super()._make_hook(index)
        return (lambda _p: None) if index == 0 else hook


strategies.register("zero2", SilentHookZero2)
