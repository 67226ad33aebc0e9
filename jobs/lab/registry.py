"""The experiment catalogue: names, descriptions, parameter schemas, validation.

The web app and the CLI import this module to build forms and to refuse bad
parameters before anything is launched, so it must stay importable without
torch: plain data and plain functions only (no imports from the rest of the lab).

A schema is JSON-serialisable. Each parameter is a dict with
``type`` (``int``, ``float``, ``str``, ``bool`` or ``str_list``), ``default``,
optional ``min``/``max`` (numbers; for ``str_list`` the bounds apply to every
item's choice set instead), optional ``choices`` (for ``str`` and every item
of a ``str_list``) and ``description``. ``validate(name, params)`` returns the
resolved parameters (defaults filled in) or raises :class:`ParamError` naming
the offending parameter.
"""

from __future__ import annotations

import copy
from typing import Any

SCHEMA_VERSION = 1


class ParamError(ValueError):
    """A parameter was refused; ``param`` names it, ``message`` says why."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


class UnknownExperiment(KeyError):
    """No experiment of that name is in the catalogue."""


def _p(type_: str, default: Any, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "default": default, "description": description, **extra}


# Shared parameters: one meaning per name, whichever experiment uses it.
_COMMON: dict[str, dict[str, Any]] = {
    "world_size": _p("int", 2, "Number of ranks (processes; one GPU each on CUDA).", min=1, max=8),
    "steps": _p("int", 5, "Timed optimizer steps per strategy (after warm-up).", min=1, max=1000),
    "warmup": _p("int", 2, "Untimed warm-up steps per strategy.", min=0, max=100),
    "batch_size": _p("int", 8, "Global batch in sequences per optimizer step.", min=1, max=4096),
    "seq_len": _p("int", 32, "Tokens per sequence.", min=4, max=8192),
    "hidden": _p("int", 64, "Hidden size h (model width).", min=8, max=16384),
    "layers": _p("int", 4, "Transformer blocks (or MLP blocks) L.", min=1, max=128),
    "heads": _p("int", 4, "Attention heads a; hidden must be divisible by it.", min=1, max=256),
    "vocab": _p("int", 256, "Vocabulary size v.", min=16, max=262144),
    "micro_batches": _p("int", 4, "Micro-batches m per optimizer step.", min=1, max=256),
    "model": _p("str", "gpt", "Which model: a small GPT or a plain residual MLP stack.",
                choices=["gpt", "mlp"]),
    "device": _p("str", "auto", "cpu (gloo), cuda (nccl, one GPU per rank) or auto "
                 "(cuda when a GPU is present).", choices=["auto", "cpu", "cuda"]),
    "seed": _p("int", 0, "Seed for weights and data.", min=0, max=2**31 - 1),
    "dtype": _p("str", "float32", "Parameter and activation dtype.",
                choices=["float32", "bfloat16"]),
    "gate_tolerance": _p("str", "float32", "Tolerances of the correctness gate: float32's, "
                         "or bfloat16's looser ones (GPU runs, whose kernels and nccl "
                         "reduce in other orders than the reference; bf16_adamw always "
                         "uses these).", choices=["float32", "bfloat16"]),
    "precision": _p("str", "fp32_sgd", "Training recipe: fp32 weights with SGD + momentum "
                    "(12 bytes/parameter), or bf16 compute with fp32 master weights and "
                    "AdamW (2 + 2 + 12 bytes/parameter), as large models are trained.",
                    choices=["fp32_sgd", "bf16_adamw"]),
}


def _params(*names: str, **overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {n: copy.deepcopy(_COMMON[n]) for n in names}
    for name, change in overrides.items():
        base = out.get(name) or {}
        out[name] = {**base, **change}
    return out


_RESULT_TRAINING = (
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
        "params": _params(
            "world_size", "device", "seed",
            ops={"type": "str_list", "default": ["all_reduce", "all_gather", "reduce_scatter",
                                                 "broadcast", "send_recv", "all_to_all"],
                 "choices": ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                             "send_recv", "all_to_all"],
                 "description": "Collectives to time."},
            min_bytes=_p("int", 1024, "Smallest message (bytes, the full buffer S).",
                         min=8, max=2**32),
            max_bytes=_p("int", 1 << 20, "Largest message (bytes); sizes double from min.",
                         min=8, max=2**33),
            iters=_p("int", 8, "Timed iterations per size (median reported).", min=1, max=1000),
            warmup=_p("int", 2, "Untimed iterations per size.", min=0, max=100),
            measure_overhead=_p("bool", True, "Also time a raw all_reduce loop against the "
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
        "params": _params(
            "device", "dtype", "seed",
            world_size=_p("int", 1, "Single process.", min=1, max=1),
            sizes=_p("str_list", ["64", "128", "256", "512"],
                     "Square GEMM edge lengths to time.",
                     choices=["32", "64", "128", "256", "512", "1024", "2048", "4096",
                              "8192"]),
            iters=_p("int", 5, "Timed iterations per shape.", min=1, max=1000),
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
        "params": _params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "layers",
            "heads", "vocab", "model", "device", "seed", "gate_tolerance", "precision",
            micro_batches=_p("int", 1, "Gradient-accumulation micro-batches per rank per "
                             "step (all-reduce only on the last).", min=1, max=64),
            bucket_cap_mb=_p("float", 0.25, "Bucket size for the bucketed strategy and DDP "
                             "(MB).", min=0.001, max=1024.0),
            strategies=_p("str_list", ["single", "dp_naive", "dp_bucket", "ddp"],
                          "Strategies to check and time.",
                          choices=["single", "dp_naive", "dp_bucket", "ddp"]),
        ),
        "min_world_size": 1,
        "result": _RESULT_TRAINING,
    },
    "pipeline": {
        "title": "Pipeline parallel: naive MP vs GPipe vs 1F1B (by hand and torch)",
        "description": (
            "Layers are split into p stages, one per rank; micro-batches flow forward and "
            "gradients flow back with send/recv. Naive model parallelism (one batch) leaves "
            "(p-1)/p of the time idle; GPipe (all forward, all backward) and 1F1B shrink the "
            "bubble to (p-1)/(m+p-1). GPipe holds activations of all m micro-batches; 1F1B "
            "at most p - rank. Compared with torch.distributed.pipelining."
        ),
        "params": _params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "heads",
            "vocab", "micro_batches", "model", "device", "seed", "gate_tolerance", "precision",
            layers=_p("int", 4, "Blocks L, split evenly-ish over the stages.", min=1, max=128),
            strategies=_p("str_list", ["naive_mp", "gpipe", "1f1b", "torch_gpipe",
                                       "torch_1f1b"],
                          "Strategies to check and time.",
                          choices=["single", "naive_mp", "gpipe", "1f1b", "torch_gpipe",
                                   "torch_1f1b"]),
        ),
        "min_world_size": 2,
        "result": _RESULT_TRAINING + " Pipeline adds the measured and predicted bubble "
                                     "fraction and activations held per stage.",
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
        "params": _params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "layers",
            "heads", "vocab", "device", "seed", "gate_tolerance", "precision",
            strategies=_p("str_list", ["single", "tp_megatron", "tp_dtensor"],
                          "Strategies to check and time.",
                          choices=["single", "tp_megatron", "tp_dtensor"]),
        ),
        "min_world_size": 1,
        "result": _RESULT_TRAINING,
    },
    "zero": {
        "title": "ZeRO sharding: stage 1 and 2 by hand vs FSDP2",
        "description": (
            "Data parallel, but the optimizer state (ZeRO-1), also the gradients (ZeRO-2), "
            "also the parameters (ZeRO-3, FSDP2 fully_shard) are split over the d ranks. "
            "Gradients are reduce-scattered and parameters all-gathered: the same bytes as "
            "DP's all-reduce for stages 1-2, 1.5x for stage 3 - memory for communication."
        ),
        "params": _params(
            "world_size", "steps", "warmup", "batch_size", "seq_len", "hidden", "layers",
            "heads", "vocab", "model", "device", "seed", "gate_tolerance", "precision",
            bucket_cap_mb=_p("float", 0.25, "Bucket size for the hand-written stages (MB).",
                             min=0.001, max=1024.0),
            strategies=_p("str_list", ["ddp", "zero1", "zero2", "fsdp2"],
                          "Strategies to check and time.",
                          choices=["single", "ddp", "zero1", "zero2", "fsdp2"]),
        ),
        "min_world_size": 1,
        "result": _RESULT_TRAINING + " Memory per rank split into parameters, gradients "
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
        "params": _params(
            "steps", "warmup", "seq_len", "hidden", "layers", "heads", "vocab", "device",
            "dtype", "seed",
            world_size=_p("int", 1, "Single process.", min=1, max=1),
            batch_size=_p("int", 4, "Sequences per step.", min=1, max=4096),
            peak_tflops=_p("float", 0.0, "Peak to divide by (TFLOP/s); 0 = the dense bf16 "
                           "datasheet peak for bf16 on H100/H200 (989) or A100 (312), else "
                           "the measured GEMM peak of the dtype.", min=0.0, max=100000.0),
            tie_head=_p("bool", False, "Tie the LM head to the token embedding (GPT-2's "
                        "124M is tied; untied it is 163M)."),
        ),
        "min_world_size": 1,
        "result": "tokens/s, FLOPs per token, achieved TFLOP/s, MFU, peak used and where it "
                  "came from, step time median/p10/p90, memory.",
    },
}


def catalogue() -> list[dict[str, Any]]:
    """Every experiment as plain JSON-ready data (a deep copy; callers may mutate)."""
    return [describe(name) for name in EXPERIMENTS]


def describe(name: str) -> dict[str, Any]:
    if name not in EXPERIMENTS:
        raise UnknownExperiment(name)
    spec = copy.deepcopy(EXPERIMENTS[name])
    return {"name": name, "schema_version": SCHEMA_VERSION, **spec}


def defaults(name: str) -> dict[str, Any]:
    return {k: copy.deepcopy(v["default"]) for k, v in describe(name)["params"].items()}


def _coerce(name: str, spec: dict[str, Any], value: Any) -> Any:
    kind = spec["type"]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ParamError(name, f"must be true or false, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ParamError(name, f"must be an integer, got {value!r}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamError(name, f"must be a number, got {value!r}")
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise ParamError(name, "must be a finite number")
    elif kind == "str":
        if not isinstance(value, str):
            raise ParamError(name, f"must be a string, got {value!r}")
    elif kind == "str_list":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ParamError(name, f"must be a list of strings, got {value!r}")
        if not value:
            raise ParamError(name, "must not be empty")
        if len(set(value)) != len(value):
            raise ParamError(name, "must not repeat an item")
        bad = [v for v in value if v not in spec.get("choices", value)]
        if bad:
            raise ParamError(name, f"unknown item(s) {bad}; choose from {spec['choices']}")
        return list(value)
    else:  # pragma: no cover - the catalogue is static
        raise ParamError(name, f"unsupported type {kind}")
    if "choices" in spec and value not in spec["choices"]:
        raise ParamError(name, f"must be one of {spec['choices']}, got {value!r}")
    if "min" in spec and value < spec["min"]:
        raise ParamError(name, f"must be >= {spec['min']}, got {value}")
    if "max" in spec and value > spec["max"]:
        raise ParamError(name, f"must be <= {spec['max']}, got {value}")
    return value


def validate(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Resolve ``params`` for experiment ``name``: fill defaults, check types,
    bounds and the rules that tie parameters together. Raises ParamError."""
    if name not in EXPERIMENTS:
        raise ParamError("experiment", f"unknown experiment {name!r}; "
                                       f"choose from {sorted(EXPERIMENTS)}")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ParamError("params", "must be a JSON object")
    schema = EXPERIMENTS[name]["params"]
    unknown = sorted(set(params) - set(schema))
    if unknown:
        raise ParamError(unknown[0], f"not a parameter of {name}; known: {sorted(schema)}")
    resolved = defaults(name)
    for key, value in params.items():
        resolved[key] = _coerce(key, schema[key], value)
    _check_rules(name, resolved)
    return resolved


def _check_rules(name: str, p: dict[str, Any]) -> None:
    w = p["world_size"]
    if w < EXPERIMENTS[name]["min_world_size"]:
        raise ParamError("world_size", f"{name} needs at least "
                                       f"{EXPERIMENTS[name]['min_world_size']} ranks")
    if "heads" in p and p["hidden"] % p["heads"]:
        raise ParamError("heads", f"hidden={p['hidden']} is not divisible by heads={p['heads']}")
    if name == "collectives":
        if p["min_bytes"] > p["max_bytes"]:
            raise ParamError("min_bytes", "must not exceed max_bytes")
        if "all_to_all" in p["ops"] or "reduce_scatter" in p["ops"] or "all_gather" in p["ops"]:
            if p["min_bytes"] < 4 * w:
                raise ParamError("min_bytes", f"must be at least 4*world_size={4 * w} bytes "
                                              "so every rank gets one fp32 element")
        n_sizes = 0
        size = p["min_bytes"]
        while size <= p["max_bytes"]:
            n_sizes += 1
            size *= 2
        if n_sizes > 32:
            raise ParamError("max_bytes", "spans more than 32 doublings from min_bytes")
    if name == "data_parallel":
        per = w * p["micro_batches"]
        if p["batch_size"] % per:
            raise ParamError("batch_size", f"must be divisible by world_size*micro_batches"
                                           f"={per}, got {p['batch_size']}")
    if name == "zero" and p["batch_size"] % w:
        raise ParamError("batch_size", f"must be divisible by world_size={w}")
    if name == "pipeline":
        m = p["micro_batches"]
        if p["layers"] < w:
            raise ParamError("layers", f"needs at least one layer per stage: layers="
                                       f"{p['layers']} < world_size={w}")
        if p["batch_size"] % m:
            raise ParamError("micro_batches", f"batch_size={p['batch_size']} is not "
                                              f"divisible by micro_batches={m}")
        one_f_one_b = [s for s in p["strategies"] if s in ("1f1b", "torch_1f1b")]
        if one_f_one_b and m < w:
            raise ParamError("micro_batches", f"{one_f_one_b[0]} needs micro_batches >= "
                                              f"stages (world_size={w}), got {m}")
    if name == "tensor_parallel":
        if p["heads"] % w:
            raise ParamError("heads", f"heads={p['heads']} is not divisible by the "
                                      f"tensor-parallel degree world_size={w}")
