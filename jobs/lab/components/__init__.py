"""What every rank runs with (torch): the model (model.py, moe.py), the optimizers
(optim.py), the run's context on a rank (context.py: process groups, progress, events),
and what is measured while it runs (instrument.py: timings and traffic; census.py: the
operations and the live memory, counted once)."""
