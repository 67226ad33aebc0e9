"""A "1F1B" that runs GPipe's order (all forwards, then all backwards): the same
gradients, but m micro-batches in flight instead of p - rank."""

from jobs.lab import strategies
from jobs.lab.strategies.pipeline_parallel import OneFOneB, PipelineBase


class GPipeIn1F1BClothing(OneFOneB):
    run_schedule = PipelineBase.run_schedule


strategies.register("1f1b", GPipeIn1F1BClothing)
