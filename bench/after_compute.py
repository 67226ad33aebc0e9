"""What a collective that comes after compute costs, two ways, on W ranks of this host:

    .venv/bin/python bench/after_compute.py [--world 8] [--group 2] [--bytes 16384]
                                            [--calls 40] [--op all_reduce|send_recv]
                                            [--gemms 3] [--fresh]

Every rank computes a segment (`gemms` GEMMs of links.py's SEGMENT_EDGE), then
calls `op` on its group of `group` consecutive ranks (send_recv: a batch of a send to the
next rank of the group and a receive from the previous, as a pipeline stage posts it),
all groups at once, as a mesh's groups run in a step:

- difference: (segments and calls) less (segments alone, right after), per call - how
  the after-compute link was probed;
- direct: each call timed by itself, from its start to its return - how the counting
  wrapper times a step's calls;
- burst: calls back to back after a barrier, no compute.

With more ranks than cores, a rank asleep in a call hands its core to the others, so
the segments run faster beside calls than alone and the difference undercounts the
call; and the longer the segment, the later a call finds its peer (--gemms). --fresh:
each all-reduce on a new tensor, as a step's activations are. Mean less the slowest
sample, in ms, the slowest rank's; and direct / difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from jobs.lab.experiments.links import SEGMENT_CALLS, SEGMENT_EDGE


def expected(times: list[float]) -> float:
    return statistics.fmean(sorted(times)[:-1])


def rank_main(rank: int, world: int, port: int, n: int, op: str, nbytes: int,
              calls: int, gemms: int, fresh: bool) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    mine = None
    for start in range(0, world, n):
        g = dist.new_group(list(range(start, start + n)))
        if start <= rank < start + n:
            mine, members = g, list(range(start, start + n))
    i = members.index(rank)
    nxt, prv = members[(i + 1) % n], members[(i - 1) % n]
    x, y = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
    a = torch.randn(SEGMENT_EDGE, SEGMENT_EDGE)

    def call() -> None:
        if op == "all_reduce":
            dist.all_reduce(x * 1.0 if fresh else x, group=mine)
        else:
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt, mine),
                                             dist.P2POp(dist.irecv, y, prv, mine)]):
                w.wait()

    def segment() -> None:
        for _ in range(gemms):
            torch.mm(a, a)

    got: dict[str, list[float]] = {"burst": [], "difference": [], "direct": [],
                                   "segment CPU": [], "send first": []}
    for _ in range(3):
        call()
    for _ in range(calls // 4):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(4):
            call()
        got["burst"].append((time.perf_counter() - t0) / 4)
        dist.barrier()
        t0, direct = time.perf_counter(), []
        for _ in range(4):
            s0 = time.thread_time()
            segment()
            got["segment CPU"].append(time.thread_time() - s0)
            c0 = time.perf_counter()
            call()
            direct.append(time.perf_counter() - c0)
        mixed = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(4):
            segment()
        got["difference"].append((mixed - (time.perf_counter() - t0)) / 4)
        got["direct"] += direct
        if op == "send_recv":  # each send posted before the compute, the receive after it
            dist.barrier()
            for _ in range(4):
                sent = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt, mine)])
                segment()
                c0 = time.perf_counter()
                for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, y, prv, mine)]):
                    w.wait()
                got["send first"].append(time.perf_counter() - c0)
                sent[0].wait()
    worst_t = torch.tensor([expected(v) if v else 0.0 for v in got.values()],
                           dtype=torch.float64)
    dist.all_reduce(worst_t, op=dist.ReduceOp.MAX)  # the slowest rank's
    if rank == 0:
        worst = dict(zip(got, worst_t.tolist(), strict=True))
        print(f"{op} {nbytes} B on groups of {n} of {world} ranks, {calls} calls after "
              f"{gemms} GEMMs: "
              + "  ".join(f"{k} {v * 1e3:.2f} ms" for k, v in worst.items())
              + f"  direct/difference {worst['direct'] / max(worst['difference'], 1e-9):.2f}",
              flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=16384)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--gemms", type=int, default=SEGMENT_CALLS,
                    help="GEMMs of SEGMENT_EDGE in a segment")
    ap.add_argument("--fresh", action="store_true",
                    help="each call on a new tensor, as a step's activations are")
    ap.add_argument("--op", choices=["all_reduce", "send_recv"], default="all_reduce")
    args = ap.parse_args()
    port = 29000 + os.getpid() % 1000
    mp.spawn(rank_main, args=(args.world, port, args.group, args.op, args.bytes, args.calls,
                                      args.gemms, args.fresh),
             nprocs=args.world)


if __name__ == "__main__":
    main()
