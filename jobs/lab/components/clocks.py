"""One clock for every rank's events, so that the timeline keeps cause before effect: a
collective ends on every rank after it began on the last one to join it.

Each rank's events are seconds since an origin. Taking the origin on each rank as it leaves
a barrier is not one clock: ranks leave a barrier milliseconds apart on a busy host (one
waits for a core), and a rank's collective could then seem to end before its peer began it.

Ranks on one host read one clock: time.perf_counter is CLOCK_MONOTONIC on Linux, the same
for every process of one boot (containers share their host's kernel), so rank 0's reading
is every local rank's origin, exactly. A rank on another host estimates how far its clock
is from rank 0's by exchanging timestamps with it, as NTP does: rank 0 sends at a, the rank
reads its clock at b, rank 0 gets the reply at c; b - (a + c) / 2 is the offset, off by at
most (c - a) / 2, and the round with the shortest (c - a) is kept.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

ROUNDS = 8  # ping rounds per remote rank: the fastest bounds the error
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def shared_within_host() -> bool:
    """Whether this host's perf_counter is one clock for all its processes."""
    return time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"


def boot() -> int:
    """This boot of this host (0: the clock cannot be shared, so no rank shares it)."""
    try:
        text = BOOT_ID.read_text().strip()
    except OSError:
        return 0
    return zlib.crc32(text.encode()) + 1 if text and shared_within_host() else 0


def common_origin(rank: int, world: int, group: Any) -> tuple[float, dict[str, Any]]:
    """(this rank's perf_counter reading at rank 0's origin, how the ranks' clocks were
    met: on rank 0 for every rank, elsewhere for this one). Every rank of `group` (CPU
    tensors: gloo) calls it at once."""
    dist.barrier(group=group)
    mine = torch.tensor([float(boot()), time.perf_counter()], dtype=torch.float64)
    every = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    boots = [int(t[0].item()) for t in every]
    zero_origin = float(every[0][1].item())
    remote = [r for r in range(1, world) if boots[r] == 0 or boots[r] != boots[0]]
    offset, exchanged = 0.0, {}
    for peer in remote:  # rank 0 and one remote rank at a time; the others wait below
        if rank == 0:
            exchanged[str(peer)] = _answer_pings(peer, group)
        elif rank == peer:
            exchanged[str(peer)] = _ping_rank0(group)
            offset = exchanged[str(peer)]["offset_s"]
    dist.barrier(group=group)
    shared = [r for r in range(world) if r not in remote]
    return zero_origin + offset, {
        "one_clock": shared if rank == 0 or rank in shared else [rank],
        "exchanged": exchanged,  # rank -> its clock minus rank 0's, and the most it is off
    }


def _answer_pings(peer: int, group: Any) -> dict[str, float]:
    """Rank 0's side: send a, get b back, note c, for ROUNDS rounds; then the best round's
    offset and error, to the peer and returned."""
    best = (float("inf"), 0.0)
    t = torch.zeros(1, dtype=torch.float64)
    for _ in range(ROUNDS):
        a = time.perf_counter()
        dist.send(torch.tensor([a], dtype=torch.float64), dst=peer, group=group)
        dist.recv(t, src=peer, group=group)
        c = time.perf_counter()
        best = min(best, (c - a, float(t.item()) - (a + c) / 2))
    dist.send(torch.tensor([best[1], best[0] / 2], dtype=torch.float64), dst=peer, group=group)
    return {"offset_s": best[1], "error_s": best[0] / 2}


def _ping_rank0(group: Any) -> dict[str, float]:
    """A remote rank's side: answer each of rank 0's timestamps with its own clock; then
    receive (offset of this clock from rank 0's, its error)."""
    t = torch.zeros(1, dtype=torch.float64)
    for _ in range(ROUNDS):
        dist.recv(t, src=0, group=group)
        dist.send(torch.tensor([time.perf_counter()], dtype=torch.float64), dst=0, group=group)
    answer = torch.zeros(2, dtype=torch.float64)
    dist.recv(answer, src=0, group=group)
    return {"offset_s": float(answer[0].item()), "error_s": float(answer[1].item())}


def describe(clock: dict[str, Any]) -> str:
    """The record in words, for the run's environment: "rank 0's: ranks 0-3 read it"."""
    shared = clock.get("one_clock") or []
    words = f"rank 0's: rank{'s' if len(shared) > 1 else ''} {_ranks(shared)} read it"
    for rank, met in sorted(clock.get("exchanged", {}).items(), key=lambda kv: int(kv[0])):
        words += f"; rank {rank} within {met['error_s'] * 1e3:.3g} ms (timestamps exchanged)"
    return words


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))
