"""What a gloo point-to-point receive waits for, on 2 ranks on this host:

    .venv/bin/python bench/p2p_wait.py [--bytes 4096] [--iters 30]

- exchange: both ranks post a send and a receive as one batch and wait (the link probe's
  send_recv);
- receive after compute: rank 0 posts its send at once, rank 1 computes for 10 ms of its
  own CPU time and only then posts the receive and waits. gloo's receive is a rendezvous
  (the payload is written when the receiver's "ready" reaches the sender's I/O thread),
  so this wait is not shorter than the exchange however early the send was posted;
- send post: how long rank 0's posting of that send took (what a send costs its stage).

The cost model prices one t_p2p per receive a stage waits for, none per send
(jobs/lab/predict/cost.py, predict_pipeline). Medians and means in ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, port: int, nbytes: int, iters: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    peer, x = 1 - rank, torch.ones(max(1, nbytes // 4))
    y, a = torch.empty_like(x), torch.randn(160, 160)
    got: dict[str, list[float]] = {"exchange": [], "receive after compute": [],
                                   "send post": []}
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer),
                                         dist.P2POp(dist.irecv, y, peer)]):
            w.wait()
        got["exchange"].append(time.perf_counter() - t0)
        dist.barrier()
        if rank == 0:
            t0 = time.perf_counter()
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, 1)])
            got["send post"].append(time.perf_counter() - t0)
            works[0].wait()
        else:
            c0 = time.thread_time()
            while time.thread_time() - c0 < 0.01:
                torch.mm(a, a)
            t0 = time.perf_counter()
            for w in dist.batch_isend_irecv([dist.P2POp(dist.irecv, y, 0)]):
                w.wait()
            got["receive after compute"].append(time.perf_counter() - t0)
    for name, times in got.items():
        if times:
            print(f"rank {rank} {nbytes} B {name:22s} median {statistics.median(times) * 1e3:7.3f}"
                  f"  mean {statistics.fmean(times) * 1e3:7.3f}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    port = 29000 + os.getpid() % 1000
    mp.spawn(rank_main, args=(port, args.bytes, args.iters), nprocs=2)


if __name__ == "__main__":
    main()
