"""The experiment journal: runs of the lab's experiments, their schedules, and how their
results reach the weekly letter. Built on the notebook; knows nothing of HTTP.

    runs.py        THE run state machine: create, lease, heartbeat, finish, cancel, reap
    run_files.py   a run's log and artifacts on disk (the one place their paths are made)
    run_metrics.py a run's parameters and scalar results as indexed rows (filter, sort)
    run_query.py   the run list's query: filters, sorts, keyset paging
    schedules.py   cron validation, next fires, firing due schedules (idempotent)
    cards.py       the ```run embed: a run's result card (HTML + inline SVG)
    posting.py     a finished run's card into its week's letter
    clock.py       the scheduler process: APScheduler's clock, asking through sqlite3
                   (waiting.py) whether work waits; rows are the truth
    scheduler.py   the scheduler's work, done with the ORM in a child of the clock

The experiment catalogue comes from the lab (jobs.lab.catalogue.registry, torch-free),
and the owner's own experiments from what runners report they have installed
(catalogue.py: the two as one catalogue).
"""
