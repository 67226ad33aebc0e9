"""One rank of an experiment: `rank()`, forked by jobs/lab/launcher/elastic.py (torchrun's agent),
or this module as a script under plain torchrun:

    python -m torch.distributed.run --standalone --nproc-per-node=N \
        -m jobs.lab.launcher.worker <experiment> --params '<json>' --out DIR

An experiment not in IMPLEMENTATIONS is one of the owner's own (jobs/lab/experiments/own.py).
Rank 0 writes DIR/result.json; every rank writes DIR/events.rank<r>.jsonl. A
correctness failure is a *result* (status "failed", reason code "correctness"),
not a crash: the workers exit 0 and the launcher maps it to its exit code.
Only a crash or a collective timeout makes a worker exit non-zero.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from typing import Any

from base import contract
from base.durable import write_json
from jobs.lab.components import context
from jobs.lab.experiments import own

IMPLEMENTATIONS = {
    "collectives": "jobs.lab.experiments.collectives",
    "gemm_roofline": "jobs.lab.experiments.roofline",
    "gpt_mfu": "jobs.lab.experiments.mfu",
    "data_parallel": "jobs.lab.experiments.training",
    "pipeline": "jobs.lab.experiments.training",
    "tensor_parallel": "jobs.lab.experiments.training",
    "zero": "jobs.lab.experiments.training",
    "mesh": "jobs.lab.experiments.training",
    "recompute": "jobs.lab.experiments.training",
    "sequence": "jobs.lab.experiments.training",
    "experts": "jobs.lab.experiments.training",
}


def _jsonable(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def _clean(o: Any) -> Any:
    """inf/nan are not JSON: they become null."""
    if isinstance(o, float) and (o != o or o in (float("inf"), float("-inf"))):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def load_plugin() -> None:
    """COMMONPLACE_LAB_PLUGIN=/path/to/file.py is executed before the experiment; tests
    use it to register a deliberately broken strategy under an existing name."""
    path = os.environ.get("COMMONPLACE_LAB_PLUGIN")
    if not path:
        return
    spec = importlib.util.spec_from_file_location("commonplace_lab_plugin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def envelope(experiment: str, params: dict, started: float, status: str,
             reason: dict | None, environment: dict, body: dict) -> dict:
    return _clean({
        "schema_version": contract.RESULT_SCHEMA_VERSION,
        "experiment": experiment,
        "params": params,
        "status": status,
        "reason": reason,
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "duration_s": time.time() - started,
        "environment": environment,
        **body,
    })


def die_with_parent() -> None:
    """Plain torchrun starts every rank in a session of its own, so killing torchrun (or its
    process group) with SIGKILL would leave ranks running for ever; a forked rank would
    outlive an agent killed alone: ask the kernel to end this rank the moment its parent
    dies."""
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: torchrun's own SIGTERM handling is all there is
    if os.getppid() != parent:  # the parent died before we asked
        os._exit(1)


def main(argv: list[str] | None = None) -> None:
    """A rank as a process of its own (plain torchrun)."""
    rank(*(sys.argv[1:] if argv is None else argv))
    # gloo's teardown sometimes aborts ("terminate called without an active exception")
    # after all work is done; every rank has finished and said so, so leave without
    # running destructors rather than turn a finished run into a crash
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def rank(*argv: str) -> None:
    """One rank, to its end (a process forked by the agent ends without a teardown)."""
    die_with_parent()
    ap = argparse.ArgumentParser(prog="jobs.lab.launcher.worker")
    ap.add_argument("experiment")
    ap.add_argument("--params", default="{}")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    started = time.time()
    # Only the launcher starts workers, with parameters it has validated and resolved
    # (defaults filled in): trusted here, not checked a third time.
    params = json.loads(args.params)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    os.makedirs(args.out, exist_ok=True)
    result_path = os.path.join(args.out, contract.RESULT_FILE)
    load_plugin()
    try:
        # (the GPUs this host needs: its own ranks, when the run spans hosts)
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        device = context.resolve_device(params.get("device", "auto"), local)
    except context.Unsupported as exc:
        if rank == 0:
            write_json(result_path, envelope(
                args.experiment, params, started, "failed",
                {"code": "unsupported", "message": str(exc)},
                context.environment(None, "cpu", world), {}), default=_jsonable)
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return
    ctx = context.init(device)
    ctx.out_dir = args.out
    context.say(f"worker rank={ctx.rank} pid={os.getpid()} backend={ctx.backend}")
    ctx.log(f"experiment {args.experiment} on {world} rank(s), {ctx.backend}, device {device}")
    ctx.progress(0, 0, phase="preparing")  # every rank has joined
    if args.experiment not in IMPLEMENTATIONS:  # the owner's own (catalogue/own.py)
        body = own.run(ctx, args.experiment, params, int(os.environ.get("LOCAL_RANK", "0")))
    else:
        module = importlib.import_module(IMPLEMENTATIONS[args.experiment])
        body = (module.run(ctx, args.experiment, params)
                if module.__name__.endswith(".training") else module.run(ctx, params))
    ctx.timeline.write(os.path.join(args.out, contract.rank_events_file(ctx.rank)))
    if ctx.rank == 0:
        failed = [s for s in body.get("strategies", []) if not s["correctness"]["passed"]]
        reason = None
        if failed:
            first = failed[0]
            reason = {"code": "correctness",
                      "message": f"strategy {first['strategy']}: "
                                 f"{first['correctness']['reason']}"}
        status = "failed" if reason else "succeeded"
        write_json(result_path, envelope(args.experiment, params, started, status, reason,
                                         context.environment(ctx, device, world),
                                         {**body, "clock": ctx.clock}), default=_jsonable)
        ctx.log(f"wrote {result_path} (status {status})")
    ctx.barrier()
    with open(os.path.join(args.out, contract.done_file(ctx.rank)), "w") as fh:
        fh.write("ok\n")


if __name__ == "__main__":
    main()
