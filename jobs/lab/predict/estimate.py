"""The what-if calculator's answer: per-rank memory, step time, communication and MFU of a
configuration (resolved by jobs/lab/predict/whatif.py), composed from the lab's own formulas.

    parameters per rank   cost.rank_params (pipeline stage, tensor-parallel split)
    model state           memorymodel.model_state (ZeRO stage over the DP degree)
    activations           memorymodel.activations x micro-batches in flight (1F1B)
    communication         cost.dp_comm / zero_comm / fsdp_comm / tp_comm / pp_comm
    step time             cost.predict_pipeline (one stage: no bubble), priced with
                          the GPU's (or the runner's calibrated) links, plus the DP/ZeRO
                          collectives that backward cannot hide
    MFU                   cost.flops_per_token x tokens / (step time x GPUs x peak)

Torch-free: the web app's /api/v1/calculator calls ``estimate``.
"""

from __future__ import annotations

import math
from typing import Any

from jobs.lab.catalogue import registry
from jobs.lab.predict import activation_choices, cost, schedule
from jobs.lab.predict import memory as memorymodel
from jobs.lab.predict.whatif import PRESETS, Hardware

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb=25
# Operators the lab's census counts on its GPT (tensor_parallel's "single", 4 blocks):
# about 30 per block forward, 2.4 times that backward, 3 per parameter tensor in the
# optimizer; priced with a runner's per-operator overhead (a GPU launches asynchronously).
OPS_PER_BLOCK, OPS_BACKWARD, OPS_PER_TENSOR = 30, 2.4, 3


def block_shapes(h: int, t: int) -> list[tuple[int, ...]]:
    """One block's parameters on a tensor-parallel rank, in the model's order: ln1, q, k,
    v (column-parallel), attention projection (row-parallel), ln2, fc, MLP projection."""
    col = [(h // t, h), (h // t,)]
    return [(h,), (h,), *col, *col, *col, (h, h // t), (h,), (h,), (h,),
            (4 * h // t, h), (4 * h // t,), (h, 4 * h // t), (h,)]


def rank_units(c: dict, rank: int) -> tuple[list, list[list]]:
    """A rank's parameter shapes as FSDP units: the root (embeddings, final LayerNorm and
    head, on the stages that hold them; maybe empty) and one unit per block."""
    L, h, s, v, t, p = c["layers"], c["hidden"], c["seq_len"], c["vocab"], c["tp"], c["pp"]
    root = [(v, h), (s, h)] if rank == 0 else []
    if rank == p - 1:
        root += [(h,), (h,)] + ([] if c["tied"] and p == 1 else [(v, h)])
    return root, [block_shapes(h, t) for _ in cost.stage_layers(L, p, rank)]


def numel(shapes: list[tuple[int, ...]]) -> int:
    return sum(math.prod(x) for x in shapes)


def memory(c: dict, hw: Hardware, rank: int) -> dict[str, Any]:
    """Bytes on one rank of stage `rank`: model state, activations, buffers."""
    L, h, s, v, t, p, d = (c[k] for k in ("layers", "hidden", "seq_len", "vocab", "tp",
                                          "pp", "dp"))
    e, m, stage = memorymodel.element_bytes(c["precision"]), c["micro_batches"], c["zero"]
    n = c["batch_size"] // (d * m) * s  # tokens per micro-batch
    P = cost.rank_params(L, h, s, v, t=t, p=p, rank=rank, tied=c["tied"])
    state = memorymodel.model_state(c["precision"], P, stage=stage, d=d)
    first, last = rank == 0, rank == p - 1
    n_blocks = len(cost.stage_layers(L, p, rank))
    ends = memorymodel.activations("gpt", 0, n, h, c["heads"], v, e, t=t, first=first,
                                   last=last)  # the embedding's and the head's
    in_flight = min(p - rank, m)
    held_blocks = activation_choices.in_flight_blocks(c, rank, n_blocks)
    activations = held_blocks * activation_choices.per_block(c, n, e) + in_flight * ends
    work = memorymodel.backward_working_set(n, h, e, t)
    temporary = max(work, memorymodel.loss_gradient("gpt", n, h, v, e) if last else 0)
    buffers = {"backward's largest temporary": temporary}
    if c["recompute"] == "full":  # a block's activations, rebuilt for its backward
        buffers["a block rebuilt"] = activation_choices.per_block(
            {**c, "recompute": "none"}, n, e)
    if d > 1 and stage == 0:
        buffers["DDP buckets"] = P * e
    elif d > 1 and stage in (1, 2):
        buffers["a bucket's staging"] = min(BUCKET_BYTES, P * e)
    elif d > 1:
        root, blocks = rank_units(c, rank)
        buffers["2 blocks gathered"] = 2 * numel(blocks[0]) * e
        buffers["root gathered"] = numel(root) * e
    if p > 1:
        buffers["pipeline receive buffers"] = in_flight * n * h * e * ((not first) + (not last))
    parts = {"params": state["params"], "grads": state["grads"],
             "optimizer": state["optimizer"], "activations": activations,
             "buffers": sum(buffers.values())}
    total = sum(parts.values())
    return {"stage": rank, "params_held": P, "parts_bytes": parts, "buffers": buffers,
            "total_bytes": total,
            "micro_batches_in_flight": held_blocks / n_blocks if n_blocks else in_flight,
            "bytes_per_param": state["total"] / P, "fits": total <= hw.hbm_bytes,
            "margin_bytes": hw.hbm_bytes - total}


def communication(c: dict, rank: int) -> dict[str, dict]:
    """Per kind of collective, one rank of stage `rank`, per optimizer step: the bytes
    (nccl-tests sizes), the calls, and the group it runs over {n, span of ranks}."""
    L, h, s, v, t, p, d = (c[k] for k in ("layers", "hidden", "seq_len", "vocab", "tp",
                                          "pp", "dp"))
    e, m = memorymodel.element_bytes(c["precision"]), c["micro_batches"]
    b = c["batch_size"] // (d * m)
    out: dict[str, dict] = {}
    if t > 1:
        tp = cost.tp_comm(len(cost.stage_layers(L, p, rank)), b, s, h, e)
        out["TP all_reduce"] = {"op": "all_reduce", "bytes": m * tp["all_reduce"]["bytes"],
                                "count": m * tp["all_reduce"]["count"], "n": t, "span": t}
    if p > 1:  # a micro-batch crosses the ranks once per virtual stage
        vs = c["virtual_stages"]
        for kind, x in cost.pp_comm(rank, p, m, b * s * h * e).items():
            out[f"PP {kind}"] = {"op": "send_recv", "bytes": vs * x["bytes"],
                                 "count": vs * x["count"], "n": 2, "span": t * d * p}
    if d > 1:
        root, blocks = rank_units(c, rank)
        embed = 2 if rank == 0 else 0  # the model's order: wte, wpe, blocks, ln_f, head
        ordered = root[:embed] + [x for b in blocks for x in b] + root[embed:]
        numels = [math.prod(x) for x in ordered]
        cap = BUCKET_BYTES // e
        if c["zero"] == 0:
            kinds = cost.dp_comm(numels, e, "ddp", cap)
        elif c["zero"] < 3:
            kinds = cost.zero_comm(numels, e, d, cap)
        else:
            units = ([root] if root else []) + blocks  # the root is not gathered again
            kinds = cost.fsdp_comm(units, d, e, e, [False] * bool(root)
                                        + [True] * len(blocks))
            kinds = {k: {"bytes": m * x["bytes"], "count": m * x["count"]}
                     for k, x in kinds.items()}
        for kind, x in kinds.items():
            out[f"DP {kind}"] = {"op": kind, **x, "n": d, "span": t * d}
    return out


def _seconds(hw: Hardware, x: dict) -> tuple[float, str]:
    link, where = hw.link(x["op"], x["span"])
    if not x["count"]:
        return 0.0, where
    return x["count"] * link.time(x["op"], x["bytes"] / x["count"], x["n"]), where


def stage_terms(c: dict, hw: Hardware, rank: int, comm: dict) -> tuple[dict, dict, dict]:
    """(forward + backward, optimizer, tensor-parallel) seconds of stage `rank`, per step."""
    L, h, s, v, t, p, d = (c[k] for k in ("layers", "hidden", "seq_len", "vocab", "tp",
                                          "pp", "dp"))
    m, tokens = c["micro_batches"], c["batch_size"] // d * s
    f = cost.rank_flops_per_token(L, h, s, v, t=t, p=p, rank=rank, tied=c["tied"])
    blocks = len(cost.stage_layers(L, p, rank))
    ops = m * (1 + OPS_BACKWARD) * OPS_PER_BLOCK * blocks
    # recomputation runs forward again (a third of forward + backward): every block's
    # (full), or the attention core's (selective)
    again = {"none": (1, 1), "selective": (1, 4 / 3), "full": (4 / 3, 4 / 3)}[c["recompute"]]
    fb = {"gemm": again[0] * f["gemm"] * tokens / hw.flops,
          "attention": again[1] * f["attention"] * tokens / hw.flops,
          "op_overhead": ops * hw.op_s, "memory_traffic": 0.0}
    state = memorymodel.model_state(c["precision"], cost.rank_params(
        L, h, s, v, t=t, p=p, rank=rank, tied=c["tied"]), stage=c["zero"], d=d)
    root, blocks = rank_units(c, rank)
    tensors = len(root) + sum(len(b) for b in blocks)
    opt = {"gemm": 0.0, "attention": 0.0, "op_overhead": OPS_PER_TENSOR * tensors * hw.op_s,
           "memory_traffic": 2 * state["total"] / hw.hbm_Bps}  # every state byte read, written
    inside = {"TP all_reduce": _seconds(hw, comm["TP all_reduce"])[0]} if t > 1 else {}
    return fb, opt, inside


def exposed_dp(c: dict, hw: Hardware, comm: dict, fb: dict) -> dict[str, float]:
    """Seconds of the DP / ZeRO collectives the step waits for. The gradients' reduction
    hides behind the last micro-batch's backward (2/3 of its compute) when overlap is on;
    ZeRO-3's gathers and reductions behind all of the compute (prefetch); ZeRO-1/2's
    gather of the updated weights comes after the optimizer, exposed."""
    compute = fb["gemm"] + fb["attention"]
    window = compute if c["zero"] == 3 else 2 / 3 * compute / c["micro_batches"]
    window = window if c["overlap"] else 0.0
    hidden_kinds = ("DP all_reduce", "DP reduce_scatter") + (
        ("DP all_gather",) if c["zero"] == 3 else ())
    hideable = sum(_seconds(hw, comm[k])[0] for k in hidden_kinds if k in comm)
    out = {}
    for kind, x in comm.items():
        if kind.startswith("DP "):
            t = _seconds(hw, x)[0]
            share = t / hideable if kind in hidden_kinds and hideable else 0.0
            out[kind] = t - share * min(window, hideable)
    return out


def estimate(c: dict, hw: Hardware) -> dict[str, Any]:
    """The whole answer for resolved inputs `c` (whatif.parse) on hardware `hw`."""
    L, h, s, v, t, p, d, m = (c[k] for k in ("layers", "hidden", "seq_len", "vocab", "tp",
                                             "pp", "dp", "micro_batches"))
    e = memorymodel.element_bytes(c["precision"])
    world, b = d * t * p, c["batch_size"] // (d * m)
    ranks = [memory(c, hw, r) for r in range(p)]
    comms = [communication(c, r) for r in range(p)]
    terms = [stage_terms(c, hw, r, comms[r]) for r in range(p)]
    t_p2p = hw.link("send_recv", t * d * p)[0].time("send_recv", b * s * h * e, 2) \
        if p > 1 else 0.0
    pipe = cost.predict_pipeline([x[0] for x in terms], [x[1] for x in terms], m,
                                      t_p2p, [x[2] for x in terms])
    worst = pipe["critical_rank"]
    step_terms = {k: v_ for k, v_ in pipe["terms_s"].items() if k != "comm"}
    vs = c["virtual_stages"]
    if p > 1:  # interleaved: fill and drain of chunks 1/v of a stage, v times the sends
        step_terms["bubble"] = pipe["terms_s"]["bubble"] / vs
        step_terms["PP send/recv"] = pipe["terms_s"]["comm"] * vs
    step_terms.update(exposed_dp(c, hw, comms[worst], terms[worst][0]))
    step = cost.prediction(step_terms, "T = pipeline (m + p - 1 slots of compute + "
                                "TP all-reduces + 2 sends) + optimizer + exposed DP/ZeRO "
                                "collectives", critical_rank=worst)
    tokens = c["batch_size"] * s
    model_flops = cost.flops_per_token("gpt", L, h, s, v, c["tied"]) * tokens
    T = step["step_time_s"]
    heaviest = max(range(p), key=lambda r: ranks[r]["total_bytes"])
    comm_out = {}
    for kind, x in comms[worst].items():
        seconds, where = _seconds(hw, x)
        comm_out[kind] = {"bytes": x["bytes"], "count": x["count"], "ranks": x["n"],
                          "link": where, "time_s": seconds}
    return {
        "model": {"preset": c["model"], "label": PRESETS.get(c["model"], {}).get(
                      "label", "custom"), **{k: c[k] for k in ("layers", "hidden", "heads",
                                                               "seq_len", "vocab", "tied")},
                  "params": cost.param_count("gpt", L, h, s, v, c["tied"]),
                  "flops_per_token": cost.flops_per_token("gpt", L, h, s, v,
                                                               c["tied"])},
        "parallel": {"dp": d, "tp": t, "pp": p, "zero": c["zero"], "world_size": world,
                     "micro_batch_size": b, "micro_batches": m, "tokens_per_step": tokens},
        "gpu": {"name": hw.name, "peak_flops": hw.peak_flops, "achieved_flops": hw.flops,
                "memory_bytes": hw.hbm_bytes, "memory_Bps": hw.hbm_Bps},
        "memory": {**ranks[heaviest], "per_stage": ranks},
        "time": {**step, "tokens_per_s": tokens / T},
        "bubble_fraction": schedule.interleaved_bubble(p, m, c["virtual_stages"]),
        "communication": comm_out,
        "mfu": model_flops / (T * world * hw.peak_flops),
        "assumptions": assumptions(c, hw),
        "lab": lab_run(c, hw),
    }


ACTIVATION_MODELS = {
    "lab": "activations as the lab's GPT block keeps them: fused attention (FlashAttention-"
           "style, no s x s scores kept) and no dropout",
    "paper": "activations as Korthikanti et al. 2022 count them (their Table 2): attention "
             "scores and softmax kept, dropout masks of 1 byte, 16-bit activations",
}


def assumptions(c: dict, hw: Hardware) -> list[str]:
    out = ["GPT blocks as the lab's model (jobs/lab/components/model.py): LayerNorm, 4h GeLU "
           "MLP, separate q/k/v", ACTIVATION_MODELS[c["activations"]],
           f"matmuls run at {hw.flops / hw.peak_flops:.0%} of the peak"
           + ("" if hw.op_s == 0 else " (measured), plus the measured per-operator "
              "overhead for about 30 operators per block forward, 2.4x backward"),
           "the optimizer reads and writes every byte of its state once, at "
           f"{hw.hbm_Bps / 1e9:,.0f} GB/s",
           "tensor parallelism as Megatron's: embeddings, head and LayerNorms replicated; "
           "its 4 all-reduces per block and micro-batch are on the critical path",
           "pipeline 1F1B: stage r holds min(p - r, m) micro-batches' activations; "
           "bubble (p - 1)/(m + p - 1)" if c["virtual_stages"] == 1 else
           f"interleaved 1F1B, {c['virtual_stages']} chunks a GPU: bubble (p - 1)/(v m + p - 1), "
           "v times the sends, a stage holds its warm-up's chunks",
           "DP gradients are reduced once per step (no_sync on the other micro-batches), "
           + ("overlapped with the last micro-batch's backward" if c["overlap"] else
              "not overlapped with compute"),
           "not counted: CUDA context and allocator fragmentation (1 to 2 GB), context "
           "parallelism"]
    if c["recompute"] != "none":
        out.append({"full": "full recomputation: a block keeps its input and runs its "
                            "forward again in backward (4/3 of the matmul time)",
                    "selective": "selective recomputation: the attention core runs again "
                                 "in backward (4/3 of the attention time)"}[c["recompute"]])
    if c["sequence_parallel"] and c["tp"] > 1:
        out.append("sequence parallelism: LayerNorms and dropout on 1/t of the tokens; each "
                   "all-reduce becomes an all-gather and a reduce-scatter of the same bytes"
                   + (", and the column-parallel inputs are kept gathered (as the lab's "
                      "sequence experiment does)" if c["activations"] == "lab" else ""))
    if c["zero"] == 3:
        out.append("ZeRO-3 gathers and reduce-scatters every micro-batch (FSDP2's default), "
                   + ("hidden behind compute by prefetch" if c["overlap"] else "exposed"))
    if hw.between_nodes is not None:
        out.append("a group wider than a node's 8 GPUs runs at the InfiniBand bandwidth; "
                   "ranks are placed TP innermost, then DP, then PP")
    return out + hw.notes


LAB = {"dp": "data_parallel", "zero": "zero", "tp": "tensor_parallel", "pp": "pipeline"}


def lab_run(c: dict, hw: Hardware) -> dict[str, Any]:
    """The lab experiment that runs this configuration, and its parameters - or why the
    lab cannot. A change it suggests (one micro-batch, a smaller batch) is one it has
    checked: the changed configuration is one the lab runs and that fits."""
    plan = _lab_plan(c)
    if plan.get("one_micro_batch"):
        return _one_micro_batch(c, hw, plan["experiment"])
    if plan["ok"] and not _fits(c, hw):
        return {"ok": False, "experiment": plan["experiment"],
                "why": "it does not fit in memory"}
    return plan


def _fits(c: dict, hw: Hardware) -> bool:
    return all(memory(c, hw, r)["fits"] for r in range(c["pp"]))


def _one_micro_batch(c: dict, hw: Hardware, name: str) -> dict[str, Any]:
    """The lab's experiment runs one micro-batch a step: the largest batch (halving the
    sequences per GPU) that it runs in one micro-batch and that fits, if there is one."""
    why = f"the lab's {name} experiment runs one micro-batch per step"
    per_gpu = c["batch_size"] // c["dp"]
    while per_gpu >= 1:
        trial = {**c, "micro_batches": 1, "batch_size": per_gpu * c["dp"]}
        plan = _lab_plan(trial)
        if not plan["ok"]:
            return {"ok": False, "experiment": name, "why": f"{why}; {plan['why']}"}
        if _fits(trial, hw):
            smaller = trial["batch_size"] != c["batch_size"]
            change = "micro-batches to 1" + (
                f" and the batch to {trial['batch_size']} sequences ({per_gpu} a GPU; "
                f"{c['batch_size'] // c['dp']} in one micro-batch does not fit)" if smaller
                else "")
            return {"ok": False, "experiment": name, "why": f"{why}: set {change}",
                    "suggest": {"micro_batches": 1, "batch_size": trial["batch_size"]}}
        per_gpu //= 2
    return {"ok": False, "experiment": name,
            "why": f"{why}, and in one micro-batch it does not fit, even one sequence a GPU"}


def _lab_plan(c: dict) -> dict[str, Any]:
    """What the lab would run, memory aside; {"one_micro_batch": True} when only the
    micro-batches stand in the way."""
    if c["recompute"] != "none" or c["sequence_parallel"] or c["virtual_stages"] > 1:
        return {"ok": False, "why": "recomputation, sequence parallelism and interleaving "
                                    "are the lab's recompute, sequence and pipeline "
                                    "experiments, each on its own: open one from the "
                                    "catalogue"}
    used = [k for k in ("tp", "pp") if c[k] > 1]
    used += ([] if c["dp"] == 1 else ["zero"] if c["zero"] else ["dp"])  # ZeRO shards DP
    if len(used) > 1:
        return {"ok": False, "why": "the lab runs one kind of parallelism at a time"}
    kind = used[0] if used else "dp"
    name = LAB[kind]
    world = {"dp": c["dp"], "zero": c["dp"], "tp": c["tp"], "pp": c["pp"]}[kind]
    params = {"world_size": world, "batch_size": c["batch_size"], "seq_len": c["seq_len"],
              "hidden": c["hidden"], "layers": c["layers"], "heads": c["heads"],
              "vocab": c["vocab"], "precision": c["precision"]}
    if name in ("data_parallel", "pipeline"):
        params["micro_batches"] = c["micro_batches"]
    elif c["micro_batches"] > 1:
        return {"ok": False, "experiment": name, "one_micro_batch": True}
    if name == "zero":
        params["strategies"] = ["ddp", "fsdp2" if c["zero"] == 3 else f"zero{c['zero']}"]
    try:
        registry.validate(name, params)
    except registry.ParamError as exc:
        return {"ok": False, "experiment": name, "why": f"outside the lab's range: "
                                                        f"{exc.param}: {exc.message}"}
    note = " (the lab's model has an untied head)" if c["tied"] else ""
    return {"ok": True, "experiment": name, "params": params, "note": note.strip()}
