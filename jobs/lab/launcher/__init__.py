"""A lab run's processes: `python -m jobs.lab run` validates and starts it (launch.py,
torch-free: it classifies how the run ended), torchrun's agent with the experiment's code
imported once (elastic.py), one rank each (worker.py); report.py tabulates results."""
