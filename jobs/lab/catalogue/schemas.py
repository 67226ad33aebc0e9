"""The experiment catalogue's data: names, descriptions and parameter schemas of the
experiments that teach one strategy at a time (combined.py: the ones that combine
them). Plain, JSON-serialisable data and no imports from the rest of the lab: the web app
reads it without torch. jobs/lab/catalogue/registry.py validates against it.
"""

from __future__ import annotations

import copy
from typing import Any


def p(type_: str, default: Any, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "default": default, "description": description, **extra}


# Shared parameters: one meaning per name, whichever experiment uses it.
COMMON: dict[str, dict[str, Any]] = {
    "world_size": p("int", 2, "Number of ranks (processes; one GPU each on CUDA).", min=1, max=8),
    "steps": p("int", 5, "Timed optimizer steps per strategy (after warm-up), at least: more "
               "are timed while the times are still noisy, within a cap.", min=1, max=1000),
    "warmup": p("int", 2, "Untimed warm-up steps per strategy.", min=0, max=100),
    "batch_size": p("int", 8, "Global batch in sequences per optimizer step.", min=1, max=4096),
    "seq_len": p("int", 32, "Tokens per sequence.", min=4, max=8192),
    "hidden": p("int", 64, "Hidden size h (model width).", min=8, max=16384),
    "layers": p("int", 4, "Transformer blocks (or MLP blocks) L.", min=1, max=128),
    "heads": p("int", 4, "Attention heads a; hidden must be divisible by it.", min=1, max=256),
    "vocab": p("int", 256, "Vocabulary size v.", min=16, max=262144),
    "micro_batches": p("int", 4, "Micro-batches m per optimizer step.", min=1, max=256),
    "model": p("str", "gpt", "Which model: a small GPT or a plain residual MLP stack.",
                choices=["gpt", "mlp"]),
    "device": p("str", "auto", "cpu (gloo), cuda (nccl, one GPU per rank) or auto "
                 "(cuda when a GPU is present).", choices=["auto", "cpu", "cuda"]),
    "seed": p("int", 0, "Seed for weights and data.", min=0, max=2**31 - 1),
    "dtype": p("str", "float32", "Parameter and activation dtype.",
                choices=["float32", "bfloat16"]),
    "gate_tolerance": p("str", "float32", "Tolerances of the correctness gate: float32's, "
                         "or bfloat16's looser ones (GPU runs, whose kernels and nccl "
                         "reduce in other orders than the reference; bf16_adamw always "
                         "uses these).", choices=["float32", "bfloat16"]),
    "precision": p("str", "fp32_sgd", "Training recipe: fp32 weights with SGD + momentum "
                    "(12 bytes/parameter), or bf16 compute with fp32 master weights and "
                    "AdamW (2 + 2 + 12 bytes/parameter), as large models are trained.",
                    choices=["fp32_sgd", "bf16_adamw"]),
}


def params(*names: str, **overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {n: copy.deepcopy(COMMON[n]) for n in names}
    for name, change in overrides.items():
        base = out.get(name) or {}
        out[name] = {**base, **change}
    return out


RESULT_TRAINING = (
    "Per strategy: correctness (loss and max gradient/parameter/optimizer-state error "
    "against the single-device reference, invariants), step time median/p10/p90, "
    "tokens/s, communication counted per collective kind (PyTorch's own strategies' "
    "too), memory per rank from the allocator against the formula with its buffers "
    "named, MFU, and the cost model's prediction after calibration, with measured/"
    "predicted ratios, the dominant term and the residual the model leaves unexplained."
)

EXPERIMENTS: dict[str, dict[str, Any]] = {
    "collectives": {
        "title": "Collective bandwidth sweep",
        "description": (
            "How fast is the interconnect? Times all_reduce, all_gather, reduce_scatter, "
            "broadcast, send/recv and all_to_all over message sizes and reports algorithm "
            "bandwidth (bytes/time) and bus bandwidth (algbw times the nccl-tests factor, "
            "comparable to the link speed). Fits latency alpha and bandwidth W per operation "
            "so that t = alpha + factor*S/W, the model every other experiment predicts with."
        ),
        "params": params(
            "world_size", "device", "seed",
            ops={"type": "str_list", "default": ["all_reduce", "all_gather", "reduce_scatter",
                                                 "broadcast", "send_recv", "all_to_all"],
                 "choices": ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                             "send_recv", "all_to_all"],
                 "description": "Collectives to time."},
            min_bytes=p("int", 1024, "Smallest message (bytes, the full buffer S).",
                         min=8, max=2**32),
            max_bytes=p("int", 1 << 20, "Largest message (bytes); sizes double from min.",
                         min=8, max=2**33),
            iters=p("int", 8, "Timed iterations per size (median reported).", min=1, max=1000),
            warmup=p("int", 2, "Untimed iterations per size.", min=0, max=100),
            measure_overhead=p("bool", True, "Also time a raw all_reduce loop against the "
                                "same loop through the instrumentation wrapper."),
        ),
        "min_world_size": 2,
        "result": "Per op and size: median/p10/p90 time, algbw, busbw; per op the fitted "
                  "alpha and W and predicted/measured times; wrapper overhead.",
    },
    "gemm_roofline": {
        "title": "Compute roofline (GEMM FLOP/s)",
        "description": (
            "What does one multiply-add cost here? Times square and transformer-shaped "
            "matrix multiplies and a large copy, then places each on the roofline "
            "t = max(2MNK/C, bytes/BW). The measured peak is what CPU MFU is a fraction of."
        ),
        "params": params(
            "device", "dtype", "seed",
            world_size=p("int", 1, "Single process.", min=1, max=1),
            sizes=p("str_list", ["64", "128", "256", "512"],
                     "Square GEMM edge lengths to time.",
                     choices=["32", "64", "128", "256", "512", "1024", "2048", "4096",
                              "8192"]),
            iters=p("int", 5, "Timed iterations per shape.", min=1, max=1000),
        ),
        "min_world_size": 1,
        "result": "Per shape: FLOP/s, arithmetic intensity, roofline bound, fraction of it; "
                  "the measured peak FLOP/s and copy bandwidth; ridge point.",
    },
    "data_parallel": {
        "title": "Data parallel: naive vs bucketed vs DDP (+ gradient accumulation)",
        "description": (
            "Every rank holds the whole model and a slice of the batch; gradients are "
            "averaged with all_reduce. The naive version all-reduces every gradient after "
            "backward; the bucketed one starts each bucket's all_reduce as soon as its "
            "gradients exist (overlap); DDP is PyTorch's. With micro_batches > 1 the first "
            "m-1 micro-batches skip the sync (no_sync), so bytes per step stay P*e."
        ),
        "params": params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "layers",
            "heads", "vocab", "model", "device", "seed", "gate_tolerance", "precision",
            micro_batches=p("int", 1, "Gradient-accumulation micro-batches per rank per "
                             "step (all-reduce only on the last).", min=1, max=64),
            bucket_cap_mb=p("float", 0.25, "Bucket size for the bucketed strategy and DDP "
                             "(MB).", min=0.001, max=1024.0),
            strategies=p("str_list", ["single", "dp_naive", "dp_bucket", "ddp"],
                          "Strategies to check and time.",
                          choices=["single", "dp_naive", "dp_bucket", "ddp"]),
        ),
        "min_world_size": 1,
        "result": RESULT_TRAINING,
    },
    "pipeline": {
        "title": "Pipeline parallel: naive MP, GPipe, 1F1B, interleaved, zero bubble",
        "description": (
            "Layers are split into p stages, one per rank; micro-batches flow forward and "
            "gradients flow back with send/recv. Naive model parallelism (one batch) leaves "
            "(p-1)/p of the time idle; GPipe (all forward, all backward) and 1F1B shrink the "
            "bubble to (p-1)/(m+p-1). GPipe holds activations of all m micro-batches; 1F1B "
            "at most p - rank. Interleaved 1F1B gives each rank v smaller chunks (rank r holds "
            "chunks r, r+p, ...; micro_batches a multiple of p, layers >= p*v): the bubble "
            "shrinks to (p-1)/(v*m+p-1) for v times the messages of a middle stage. A "
            "zero-bubble schedule (ScheduleInterleavedZeroBubble) splits backward into its "
            "input and weight halves and fills the bubble with the latter: (p-1)/(3*v*m+p-1) "
            "with equal F, B and W. Compared with torch.distributed.pipelining."
        ),
        "params": params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "heads",
            "vocab", "micro_batches", "model", "device", "seed", "gate_tolerance", "precision",
            layers=p("int", 4, "Blocks L, split evenly-ish over the stages.", min=1, max=128),
            virtual_stages=p("int", 2, "Virtual stages v per rank for the interleaved "
                             "schedules (rank r holds chunks r, r+p, ...): the bubble becomes "
                             "(p-1)/(v*m+p-1) for v times the point-to-point traffic.",
                             min=1, max=16),
            strategies=p("str_list", ["naive_mp", "gpipe", "1f1b", "torch_gpipe",
                                       "torch_1f1b"],
                          "Strategies to check and time.",
                          choices=["single", "naive_mp", "gpipe", "1f1b", "torch_gpipe",
                                   "torch_1f1b", "interleaved_1f1b", "torch_interleaved_1f1b",
                                   "torch_zero_bubble"]),
        ),
        "min_world_size": 2,
        "result": RESULT_TRAINING + " Pipeline adds the measured and predicted bubble "
                                     "fraction and activations held per stage; the "
                                     "interleaved schedules their order per chunk.",
    },
    "tensor_parallel": {
        "title": "Tensor parallel: Megatron by hand vs DTensor",
        "description": (
            "Each block's attention heads and MLP columns are split over t ranks: a "
            "column-parallel linear, then a row-parallel one, joined by the f operator "
            "(identity forward, all_reduce backward) and the g operator (all_reduce forward, "
            "identity backward) -> 4 all-reduces of b*s*h per layer, on the critical path. "
            "Compared with DTensor ColwiseParallel/RowwiseParallel."
        ),
        "params": params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "layers",
            "heads", "vocab", "device", "seed", "gate_tolerance", "precision",
            strategies=p("str_list", ["single", "tp_megatron", "tp_dtensor"],
                          "Strategies to check and time.",
                          choices=["single", "tp_megatron", "tp_dtensor"]),
        ),
        "min_world_size": 1,
        "result": RESULT_TRAINING,
    },
    "zero": {
        "title": "ZeRO sharding: stages 1, 2 and 3 by hand vs FSDP2",
        "description": (
            "Data parallel, but the optimizer state (ZeRO-1), also the gradients (ZeRO-2), "
            "also the parameters (ZeRO-3 by hand: each unit - the embedding, each block, the "
            "head - all-gathered for forward and again for backward, freed after, its "
            "gradients reduce-scattered; FSDP2 fully_shard) are split over the d ranks. "
            "Gradients are reduce-scattered and parameters all-gathered: the same bytes as "
            "DP's all-reduce for stages 1-2, 1.5x for stage 3 - memory for communication."
        ),
        "params": params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "layers",
            "heads", "vocab", "model", "device", "seed", "gate_tolerance", "precision",
            bucket_cap_mb=p("float", 0.25, "Bucket size for the hand-written stages 1 and 2 "
                             "(MB); ZeRO-3 shards by unit.", min=0.001, max=1024.0),
            strategies=p("str_list", ["ddp", "zero1", "zero2", "zero3", "fsdp2"],
                          "Strategies to check and time.",
                          choices=["single", "ddp", "zero1", "zero2", "zero3", "fsdp2"]),
        ),
        "min_world_size": 1,
        "result": RESULT_TRAINING + " Memory per rank split into parameters, gradients "
                                     "and optimizer state.",
    },
    "gpt_mfu": {
        "title": "Single-device GPT throughput and MFU",
        "description": (
            "Trains a GPT on one device and reports tokens/s and model FLOPs utilisation: "
            "(6N + 12*L*h*s) FLOPs per token times tokens/s over the peak - 989 TFLOP/s "
            "bf16 dense on H100/H200 for a bf16 run, else the measured GEMM peak (named "
            "in the result)."
        ),
        "params": params(
            "steps", "warmup", "seq_len", "hidden", "layers", "heads", "vocab", "device",
            "dtype", "seed",
            world_size=p("int", 1, "Single process.", min=1, max=1),
            steps={"description": "Timed optimizer steps (after warm-up)."},
            batch_size=p("int", 4, "Sequences per step.", min=1, max=4096),
            peak_tflops=p("float", 0.0, "Peak to divide by (TFLOP/s); 0 = the dense bf16 "
                           "datasheet peak for bf16 on H100/H200 (989) or A100 (312), else "
                           "the measured GEMM peak of the dtype.", min=0.0, max=100000.0),
            tie_head=p("bool", False, "Tie the LM head to the token embedding (GPT-2's "
                        "124M is tied; untied it is 163M)."),
        ),
        "min_world_size": 1,
        "result": "tokens/s, FLOPs per token, achieved TFLOP/s, MFU, peak used and where it "
                  "came from, step time median/p10/p90, memory.",
    },
}
