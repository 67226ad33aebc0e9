"""Every rank sleeps outside any collective: only the launcher's watchdog can end it."""

import time

from jobs.lab import strategies
from jobs.lab.strategies.data_parallel import DataParallelNaive


class Sleep(DataParallelNaive):
    def train_step(self, batch):
        time.sleep(3600)


strategies.register("dp_naive", Sleep)
