"""A run's statuses: the words the server's state machine (app/journal/runs.py, which owns
the transitions between them), the runner agent and the terminal client all speak."""

QUEUED, LEASED, RUNNING = "QUEUED", "LEASED", "RUNNING"
SUCCEEDED, FAILED, CANCELLED, LOST = "SUCCEEDED", "FAILED", "CANCELLED", "LOST"
EXPIRED, SKIPPED = "EXPIRED", "SKIPPED"
ACTIVE = (LEASED, RUNNING)  # a runner holds its lease
UNFINISHED = (QUEUED, LEASED, RUNNING)
TERMINAL = (SUCCEEDED, FAILED, CANCELLED, LOST, EXPIRED, SKIPPED)
STATUSES = UNFINISHED + TERMINAL
