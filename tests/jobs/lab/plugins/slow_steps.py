"""Naive DP whose every step also sleeps COMMONPLACE_TEST_STEP_SLEEP seconds (default 2):
a run that lasts long enough to live through a drill (a web outage), then succeeds."""

import os
import time

from jobs.lab import strategies
from jobs.lab.strategies.data_parallel import DataParallelNaive


class Slow(DataParallelNaive):
    def train_step(self, batch):
        time.sleep(float(os.environ.get("COMMONPLACE_TEST_STEP_SLEEP", "2")))
        return super().train_step(batch)


strategies.register("dp_naive", Slow)
