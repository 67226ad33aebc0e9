"""torchrun, with every rank forked from its agent: the launcher's command is

    python -m jobs.lab.launcher.elastic <torchrun's own flags> \
        -m jobs.lab.launcher.worker <experiment> …

Plain torchrun starts each rank as a new Python, which imports torch and, at its
optimizer's first step, torch._dynamo: seconds of CPU each, on every rank. Here the agent imports
both once, with the experiment's own code, and starts the ranks the way torchrun starts a
function entry point with `--start-method fork`: each rank begins with all of it loaded
and runs worker.rank. Everything else is torchrun's: its flags, rendezvous (one host or a
gang), log tee and prefixes, and tearing the ranks down when one fails.

bench/launch.py measures both ways in one run (docs/PERFORMANCE.md, *Starting a run's
ranks*).

Forking is safe for CUDA while the agent has not initialised it. The imports here touch
no device; torchrun's LaunchConfig asks torch.cuda.is_available(), which calls cuInit
(and so spoils CUDA in every forked child) unless PYTORCH_NVML_BASED_CUDA_CHECK=1, set
before torch is imported, makes it ask NVML instead.
"""

from __future__ import annotations

import os

os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # before torch: see above

import importlib  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402

import torch._dynamo  # noqa: E402,F401  (what an optimizer's first step imports)
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.distributed.launcher.api import elastic_launch  # noqa: E402
from torch.distributed.run import config_from_args, parse_args  # noqa: E402

from jobs.lab.launcher import worker  # noqa: E402

WORKER = "jobs.lab.launcher.worker"


@record
def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not (args.module and args.training_script == WORKER):
        raise SystemExit(f"jobs.lab.launcher.elastic runs only -m {WORKER}")
    experiment = args.training_script_args[0] if args.training_script_args else ""
    if experiment in worker.IMPLEMENTATIONS:
        importlib.import_module(worker.IMPLEMENTATIONS[experiment])
    args.start_method = "fork"
    if args.standalone:  # as torchrun's own run() resolves --standalone
        args.rdzv_backend, args.rdzv_endpoint = "c10d", "localhost:0"
        args.rdzv_id = str(uuid.uuid4())
    if args.master_port is None:
        args.master_port = 29500
    config, _, _ = config_from_args(args)
    elastic_launch(config=config, entrypoint=rank)(*args.training_script_args)


def rank(*argv: str) -> None:
    """worker.rank in a forked process, as a new Python would run it: the signals the
    agent handles (it raises on them, to tear its ranks down) are the defaults again, so
    a rank told to stop by SIGTERM stops there. Its exception is printed as a rank of its
    own prints it, through the hook init_process_group installs ("[rank1]: Traceback …"),
    for the launcher to read in the log; torchrun would only keep it in an error file."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        worker.rank(*argv)
    except Exception:
        sys.excepthook(*sys.exc_info())
        raise


if __name__ == "__main__":
    main()
