"""torchrun, with every rank forked from its agent: the launcher's command is

    python -m jobs.lab.launcher.elastic <torchrun's own flags> \
        -m jobs.lab.launcher.worker <experiment> …

Plain torchrun starts each rank as a new Python, which imports torch and, at its
optimizer's first step, torch._dynamo: seconds of CPU each, on every rank. Here the agent imports
both once (torch._dynamo only for a run that will use it: preloads), with the
experiment's own code, freezes it all out of the garbage collector, and starts the ranks
the way torchrun starts a function entry point with `--start-method fork`: each rank
begins with all of it loaded and runs worker.rank. Everything else is torchrun's: its
flags, rendezvous (one host or a gang), log tee and prefixes, and tearing the ranks down
when one fails.

bench/launch.py measures both ways in one run (docs/PERFORMANCE.md, *Starting a run's
ranks*).

Forking is safe for CUDA only while the agent has not initialised it, and that cannot be
promised: torchrun's LaunchConfig asks torch.cuda.is_available(), and even with
PYTORCH_NVML_BASED_CUDA_CHECK=1 (set below, before torch is imported) torch falls back to
cudaGetDeviceCount - cuInit in the agent, a broken CUDA in every forked child - whenever
NVML cannot load or answer, or CUDA_VISIBLE_DEVICES names MIG devices (torch/cuda's
_device_count_nvml gives up on "MIG-"). So ranks that may use CUDA are never forked from
the agent: they start by forkserver, a fresh Python (exec'd, not forked from the agent)
that imports the same modules once and forks each rank from itself; only device=cpu runs
(CUDA_VISIBLE_DEVICES="", launch.py) and hosts whose torch has no CUDA are forked from
the agent. A rank that finds itself in a bad fork anyway stops with a clear error.
"""

from __future__ import annotations

import os

from base.contract import progress_line

os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # before torch: see above
if __name__ == "__main__":  # (the forkserver imports this module too: it says nothing)
    # importing torch takes seconds on a busy host: the run page says so meanwhile
    print(progress_line(0, 0, {"phase": "loading"}), flush=True)

import atexit  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402

import torch  # noqa: E402
from torch.distributed import TCPStore  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.distributed.elastic.rendezvous import rendezvous_handler_registry  # noqa: E402
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import (  # noqa: E402
    StaticTCPRendezvous,
    create_rdzv_handler,
)
from torch.distributed.launcher.api import elastic_launch  # noqa: E402
from torch.distributed.run import config_from_args, parse_args  # noqa: E402

from jobs.lab import strategies  # noqa: E402
from jobs.lab.components import census  # noqa: E402
from jobs.lab.launcher import worker  # noqa: E402

WORKER = "jobs.lab.launcher.worker"
AGENT = "jobs.lab.launcher.elastic"
FORKSERVER = "jobs.lab.launcher.forkserver"  # imported by the forkserver only, first
RDZV_FD_ENV = "COMMONPLACE_RDZV_FD"  # launch.py's: node 0's reserved listening socket
RESERVED = "reserved-static"
# Where a one-host run's ranks reach the agent's store: a number, not the host's name
# (torchrun's default). A forked rank that looks up a name can wait for ever: glibc's
# resolver lock, held at the fork by another of the agent's threads, stays held in the
# child, where no thread will release it (a rank seen stuck in getaddrinfo under
# TCPStore's connect, on a loaded host).
STORE_ADDRESS = "127.0.0.1"


class ReservedStaticRendezvous(StaticTCPRendezvous):
    """torchrun's static rendezvous, whose node 0 serves its store on a socket reserved
    (bound and listening) before the port was handed to the other nodes, rather than
    binding the port only now, when another process may have taken it. Connections
    that arrived meanwhile wait in its backlog."""

    def __init__(self, inner: StaticTCPRendezvous, fd: int) -> None:
        super().__init__(inner.master_addr, inner.master_port, inner.rank, inner.world_size,
                         inner.run_id, int(inner.timeout.total_seconds()))
        self.fd = fd

    def get_backend(self) -> str:
        return RESERVED

    def next_rendezvous(self):  # noqa: ANN201  (torchrun's RendezvousInfo)
        if self._store is None and self.rank == 0:
            self._store = TCPStore(self.master_addr, self.master_port, self.world_size, True,
                                   self.timeout, multi_tenant=True, master_listen_fd=self.fd)
        return super().next_rendezvous()


def _reserved_handler(params):  # noqa: ANN001,ANN202  (torchrun's registry calls it)
    return ReservedStaticRendezvous(create_rdzv_handler(params), int(os.environ[RDZV_FD_ENV]))


def requested_params(script_args: list[str]) -> dict:
    """The worker's --params ({} when there are none to read)."""
    try:
        params = json.loads(script_args[script_args.index("--params") + 1])
    except (ValueError, IndexError):
        return {}
    return params if isinstance(params, dict) else {}


def requested_device(script_args: list[str]) -> str:
    """The device the worker's --params ask for ("auto" when they do not say)."""
    return str(requested_params(script_args).get("device", "auto"))


# what autograd imports at the first backward given a gradient (a pipeline stage's, the
# attention probe's): with sympy, half a second of CPU a process
AUTOGRAD_LAZY = "torch.fx.experimental.symbolic_shapes"


def preloads(experiment: str, params: dict) -> list[str]:
    """What the ranks will import on their own besides the experiment's code, for the agent
    to import once: torch._dynamo (seconds of CPU, with inductor and sympy) for a training
    run with one of PyTorch's own strategies (DDP, torch.optim, checkpoint, pipelining
    import it as they build; training.run imports it for them) or an owner's own
    experiment, whose code may; for the lab's hand-written strategies only what their
    backward imports. The collectives, the roofline and the MFU run import neither
    (tests/jobs/lab/test_lab_memory.py has the hand-written strategies' side)."""
    module = worker.IMPLEMENTATIONS.get(experiment)
    if module is None:
        return ["torch._dynamo"]
    if not module.endswith(".training"):
        return []
    try:
        builtin = any(strategies.get(name).builtin for name in params["strategies"])
    except (KeyError, TypeError, AttributeError, ImportError):
        builtin = True  # not the launcher's resolved parameters: load what any run may need
    return ["torch._dynamo"] if builtin else [AUTOGRAD_LAZY]


def start_method(device: str, cuda_built: bool) -> str:
    """fork where no rank can touch CUDA; else forkserver (the module docstring says why)."""
    if device == "cpu" or (device == "auto" and not cuda_built):
        return "fork"
    return "forkserver"


@record
def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not (args.module and args.training_script == WORKER):
        raise SystemExit(f"jobs.lab.launcher.elastic runs only -m {WORKER}")
    experiment = args.training_script_args[0] if args.training_script_args else ""
    preload = [FORKSERVER, AGENT, WORKER]
    if experiment in worker.IMPLEMENTATIONS:
        importlib.import_module(worker.IMPLEMENTATIONS[experiment])
        preload.append(worker.IMPLEMENTATIONS[experiment])
    for name in preloads(experiment, requested_params(args.training_script_args)):
        importlib.import_module(name)
        preload.append(name)
    device = requested_device(args.training_script_args)
    args.start_method = start_method(device, torch.backends.cuda.is_built())
    if args.start_method == "forkserver":
        multiprocessing.set_forkserver_preload(preload)
    # (launch.py reads this line as the agent reaching its rendezvous)
    print(progress_line(0, 0, {"phase": "starting", "ranks": args.nproc_per_node,
                               "start_method": args.start_method, "device": device}),
          flush=True)
    if args.standalone:  # as torchrun's own run() resolves --standalone
        args.rdzv_backend, args.rdzv_endpoint = "c10d", "localhost:0"
        args.rdzv_id = str(uuid.uuid4())
        args.local_addr = STORE_ADDRESS
    if args.master_port is None:
        args.master_port = 29500
    # Everything loaded so far lives as long as the process: frozen out of the collector
    # here, once, a forked rank's collections never walk it - nor write to its pages, each
    # a copy-on-write fault in every rank (census.freeze_startup, which the training run
    # calls again for what it imports itself, keeps the tensors among it for its memory
    # measurement)
    census.freeze_startup()
    config, _, _ = config_from_args(args)
    if config.rdzv_backend == "static" and os.environ.get(RDZV_FD_ENV, "").isdigit():
        # (after config_from_args, which gives only "static" its node rank)
        rendezvous_handler_registry.register(RESERVED, _reserved_handler)
        config.rdzv_backend = RESERVED
    elastic_launch(config=config, entrypoint=rank)(*args.training_script_args)


def rank(*argv: str) -> None:
    """worker.rank in a forked process, as a new Python would run it: the signals the
    agent handles (it raises on them, to tear its ranks down) are the defaults again, so
    a rank told to stop by SIGTERM stops there. Its exception is printed as a rank of its
    own prints it, through the hook init_process_group installs ("[rank1]: Traceback …"),
    for the launcher to read in the log; torchrun would only keep it in an error file."""
    if torch.cuda._is_in_bad_fork():  # forked from a process that had initialised CUDA
        raise SystemExit("this rank was forked after CUDA was initialised in its parent; "
                         "CUDA cannot work here (start ranks by forkserver or spawn)")
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
    # The ranks have finished and the launcher is waiting on this process's exit, which
    # would first tear down every module torch and torch._dynamo loaded: CPU spent on
    # nothing, at the end of every run. The exit handlers still run (logging's flush
    # among them); the teardown is skipped. (A failure raised above exits as before.)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
