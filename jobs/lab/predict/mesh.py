"""The mesh experiment's arithmetic - plain Python, no torch: where each rank sits in the
grid, which ranks are its peers in each dimension, which link each dimension's traffic
crosses, and the bytes each dimension moves per optimizer step.

Rank order (tp innermost, then pp, dp outermost - torch's init_device_mesh(("dp", "pp",
"tp")) row-major order):

    rank = ((dp_idx * pp) + pp_idx) * tp + tp_idx

so the t ranks of a tensor-parallel group are consecutive and share a node whenever t
divides ranks_per_node (Megatron's default order, "tp-cp-ep-dp-pp", also keeps tp
innermost but puts pp outermost; with either, tp's all-reduces stay inside a node).

Bytes per rank and step (e bytes an element, B global sequences, m micro-batches,
L_r the blocks of this rank's stage, P_r the parameters it holds):

    tp  4 * L_r * (B/d) * s * h * e     all_reduce (f and g twice per block), 4 L_r m calls
        DTensor's plan: 6 per block instead of 4 (q, k, v and fc each all-reduce their
        input's gradient)
    pp  2 * m * (B/(d m)) * s * h * e   per boundary the stage touches, each way (send/recv)
    dp  P_r * e                          all_reduce of the gradients, in buckets, once a step
        FSDP2 (torch_dp_tp): all_gather 2 x padded P_r e (blocks; the root once) and
        reduce_scatter P_r e (of e_reduce bytes)
        DDP per pipeline stage (torch_dp_pp): dp_pp's, one bucketed all_reduce a step

A link is intra-node when every rank of the group (or both ends of a send) is on one
node, node = rank // ranks_per_node; otherwise inter-node.
"""

from __future__ import annotations

from jobs.lab.predict import cost

DIMS = ("dp", "pp", "tp")


def degrees(strategy: str, world: int, tp: int, pp: int) -> dict[str, int]:
    """(dp, pp, tp) of a strategy at this world size: the dimensions it does not use are 1."""
    t = tp if strategy in ("dp_tp", "torch_dp_tp", "dp_pp_tp") else 1
    p = pp if strategy in ("dp_pp", "dp_pp_tp", "torch_dp_pp") else 1
    return {"dp": world // (t * p), "pp": p, "tp": t}


def rank_of(dp_idx: int, pp_idx: int, tp_idx: int, deg: dict[str, int]) -> int:
    return (dp_idx * deg["pp"] + pp_idx) * deg["tp"] + tp_idx


def coords(rank: int, deg: dict[str, int]) -> dict[str, int]:
    """(dp, pp, tp) index of a rank."""
    tp_idx = rank % deg["tp"]
    pp_idx = (rank // deg["tp"]) % deg["pp"]
    return {"dp": rank // (deg["tp"] * deg["pp"]), "pp": pp_idx, "tp": tp_idx}


def group_of(rank: int, dim: str, deg: dict[str, int]) -> list[int]:
    """The ranks that differ from `rank` only in dimension `dim` (its peers there)."""
    c = coords(rank, deg)
    return [rank_of(*(i if d == dim else c[d] for d in DIMS), deg) for i in range(deg[dim])]


def groups(dim: str, deg: dict[str, int]) -> list[list[int]]:
    """Every group of a dimension, in the order every rank creates them."""
    world = deg["dp"] * deg["pp"] * deg["tp"]
    seen: list[list[int]] = []
    for r in range(world):
        g = group_of(r, dim, deg)
        if g not in seen:
            seen.append(g)
    return seen


def link(ranks: list[int], ranks_per_node: int) -> str:
    return "intra" if len({r // ranks_per_node for r in ranks}) == 1 else "inter"


def dim_bytes(strategy: str, rank: int, deg: dict[str, int], *, L: int, B: int, s: int,
              h: int, e: int, m: int, numels: list[int], cap_elems: int,
              fsdp: dict | None = None) -> dict[str, dict[str, int]]:
    """{dim: {kind: {bytes, count}}} one rank moves per step. numels: the parameters this
    rank holds (its stage, its tensor-parallel slices), in model order; fsdp: the
    cost.fsdp_comm table of torch_dp_tp's data-parallel dimension."""
    c = coords(rank, deg)
    out: dict[str, dict] = {d: {} for d in DIMS}
    local_b = B // deg["dp"]
    if deg["tp"] > 1:
        layers = len(cost.stage_layers(L, deg["pp"], c["pp"]))
        per = 6 if strategy == "torch_dp_tp" else 4
        tp = cost.tp_comm(layers, local_b, s, h, e, per)
        tp["all_reduce"]["count"] *= m
        out["tp"] = tp
    if deg["pp"] > 1:
        out["pp"] = cost.pp_comm(c["pp"], deg["pp"], m, local_b // m * s * h * e)
    if deg["dp"] > 1:
        out["dp"] = fsdp if fsdp is not None else \
            cost.dp_comm(numels, e, "dp_bucket", cap_elems)
    return out


def merged(per_dim: dict[str, dict]) -> dict[str, dict[str, int]]:
    """The per-kind table predicted_comm returns: every dimension's kinds summed."""
    out: dict[str, dict[str, int]] = {}
    for kinds in per_dim.values():
        for kind, c in kinds.items():
            row = out.setdefault(kind, {"bytes": 0, "count": 0})
            row["bytes"] += c["bytes"]
            row["count"] += c["count"]
    return out


def breakdown(per_dim: dict[str, dict], rank: int, deg: dict[str, int],
              ranks_per_node: int) -> dict[str, dict]:
    """{dim: {bytes, calls, peers, link}} for one rank: the bytes it moves in each
    dimension and over which kind of link (a pipeline stage's two neighbours may sit on
    different kinds: its link is inter-node if either is)."""
    out = {}
    for dim in DIMS:
        if deg[dim] == 1:
            continue
        peers = group_of(rank, dim, deg)
        if dim == "pp":
            i = peers.index(rank)
            peers = peers[max(0, i - 1):i + 2]
        kinds = per_dim.get(dim, {})
        out[dim] = {"bytes": sum(k["bytes"] for k in kinds.values()),
                    "calls": sum(k["count"] for k in kinds.values()),
                    "peers": peers, "link": link(peers, ranks_per_node)}
    return out


def totals(breakdowns: list[dict[str, dict]]) -> dict[str, dict]:
    """Over every rank: bytes per dimension, per link kind, and the dimension whose
    traffic dominates (the most bytes)."""
    by_dim: dict[str, int] = {}
    by_link = {"intra": 0, "inter": 0}
    for b in breakdowns:
        for dim, row in b.items():
            by_dim[dim] = by_dim.get(dim, 0) + row["bytes"]
            by_link[row["link"]] += row["bytes"]
    dominant = max(by_dim, key=lambda d: by_dim[d]) if any(by_dim.values()) else None
    return {"bytes_per_dim": by_dim, "bytes_per_link": by_link, "dominant": dominant}


def dominant_line(totals_: dict) -> str | None:
    """One sentence for the card: which dimension's traffic dominates, and over which link."""
    dim = totals_.get("dominant")
    if not dim:
        return None
    all_bytes = sum(totals_["bytes_per_dim"].values())
    share = totals_["bytes_per_dim"][dim] / all_bytes if all_bytes else 0.0
    names = {"dp": "data-parallel gradients", "pp": "pipeline activations",
             "tp": "tensor-parallel all-reduces"}
    inter = totals_["bytes_per_link"]["inter"]
    return (f"{dim} dominates: {names[dim]} are {share:.0%} of the bytes; "
            f"{inter / all_bytes if all_bytes else 0:.0%} of all bytes cross nodes")
