"""The what-if calculator's inputs: model presets, GPUs, and the checks every input passes.

A configuration - a model, a batch, a precision, a GPU and the DP / TP / PP / ZeRO
degrees - is priced by jobs/lab/predict/estimate.py with the lab's own formulas
(cost.py, memory.py), so the calculator and a run's prediction agree. This
module is plain data and validation, torch-free: the web app imports it.

``parse(raw)`` takes what a JSON body or a query string sent (numbers or their text) and
returns the resolved inputs, or raises registry.ParamError naming the field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from jobs.lab.catalogue.registry import ParamError
from jobs.lab.predict import activation_choices
from jobs.lab.predict import memory as memorymodel
from jobs.lab.predict.calibration import LinkFit

# GPT-style blocks, exactly as the lab's model (jobs/lab/components/model.py: LayerNorm, separate
# q/k/v, a 4h GeLU MLP, learned positions): a "7B" here is what the lab's formula gives
# for Llama-2-7B's shape (6.7B; Llama's SwiGLU MLP and untied head make it 6.7B too, by
# coincidence of the 3 x 11008 vs 2 x 16384 widths), and "70B" is 65B (Llama-2-70B's
# grouped-query attention and wider SwiGLU MLP are not modelled).
PRESETS: dict[str, dict[str, Any]] = {
    "124m": {"label": "GPT-2 124M", "layers": 12, "hidden": 768, "heads": 12,
             "seq_len": 1024, "vocab": 50257, "tied": True},
    "1b": {"label": "~1B (GPT, 18 blocks of 2048)", "layers": 18, "hidden": 2048,
           "heads": 16, "seq_len": 2048, "vocab": 50257, "tied": True},
    "7b": {"label": "7B (Llama-2-7B's shape)", "layers": 32, "hidden": 4096, "heads": 32,
           "seq_len": 4096, "vocab": 32000, "tied": False},
    "70b": {"label": "70B (Llama-2-70B's shape)", "layers": 80, "hidden": 8192,
            "heads": 64, "seq_len": 4096, "vocab": 32000, "tied": False},
}
SHAPE = ("layers", "hidden", "heads", "seq_len", "vocab", "tied")

GB = 1e9
MiB = 2**20
# Datasheet figures. Peaks are dense bf16 (the sparse figures are twice these): H100 SXM
# and H200 989.4 TFLOP/s, A100 312 (NVIDIA H100 / H200 / A100 datasheets). HBM: H100 SXM
# 80 GB HBM3 at 3.35 TB/s, H200 141 GB HBM3e at 4.8 TB/s, A100 80GB HBM2e at 2.039 TB/s;
# the sizes are what nvidia-smi reports (81559, 143771, 81920 MiB). NVLink: 900 GB/s
# (H100, H200; NVLink 4) and 600 GB/s (A100; NVLink 3) both directions together; the bus
# bandwidths are what nccl-tests measures on 8 GPUs without NVLink SHARP (H100/H200 about
# 370 GB/s, nccl-tests #212; A100 200 to 230 GB/s, nccl-tests #149, #178). Between nodes:
# one 400 Gb/s InfiniBand NIC per GPU (DGX H100, DGX A100: 200 Gb/s), about 80% of line
# rate. alpha, a collective's fixed cost, is an assumption of the order NCCL shows for
# small messages inside a node (tens of microseconds), not a datasheet number.
GPUS: dict[str, dict[str, Any]] = {
    "h100": {"label": "H100 SXM 80GB", "peak_flops": 989.4e12, "hbm_bytes": 81559 * MiB,
             "hbm_Bps": 3.35e12, "nvlink_busbw_Bps": 370e9, "ib_busbw_Bps": 40e9,
             "alpha_s": 20e-6, "gpus_per_node": 8},
    "h200": {"label": "H200 SXM 141GB", "peak_flops": 989.4e12, "hbm_bytes": 143771 * MiB,
             "hbm_Bps": 4.8e12, "nvlink_busbw_Bps": 370e9, "ib_busbw_Bps": 40e9,
             "alpha_s": 20e-6, "gpus_per_node": 8},
    "a100": {"label": "A100 SXM 80GB", "peak_flops": 312e12, "hbm_bytes": 81920 * MiB,
             "hbm_Bps": 2.039e12, "nvlink_busbw_Bps": 215e9, "ib_busbw_Bps": 20e9,
             "alpha_s": 25e-6, "gpus_per_node": 8},
}
RUN_GPU = re.compile(r"run:([1-9][0-9]{0,11})")
MAX_WORLD = 16384
LINK_OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")

# name: (type, default, low, high); a preset's shape fills layers .. tied
FIELDS: dict[str, tuple[str, Any, Any, Any]] = {
    "model": ("str", "7b", None, None),
    "layers": ("int", 12, 1, 512),
    "hidden": ("int", 768, 8, 65536),
    "heads": ("int", 12, 1, 1024),
    "seq_len": ("int", 1024, 1, 262144),
    "vocab": ("int", 50257, 2, 1048576),
    "tied": ("bool", True, None, None),
    "batch_size": ("int", 128, 1, 2**24),
    "micro_batches": ("int", 16, 1, 65536),
    "precision": ("str", "bf16_adamw", None, None),
    "gpu": ("str", "h100", None, None),
    "dp": ("int", 8, 1, MAX_WORLD),
    "tp": ("int", 1, 1, MAX_WORLD),
    "pp": ("int", 1, 1, MAX_WORLD),
    "zero": ("int", 1, 0, 3),
    "efficiency": ("float", 0.5, 0.05, 1.0),
    "overlap": ("bool", True, None, None),
    "memory_gb": ("float", 0.0, 0.0, 1e6),
    "sequence_parallel": ("bool", False, None, None),
    "recompute": ("str", "none", None, None),
    "virtual_stages": ("int", 1, 1, 64),
    "activations": ("str", "lab", None, None),
}


def defaults() -> dict[str, Any]:
    return {name: spec[1] for name, spec in FIELDS.items()}


def _typed(name: str, value: Any) -> Any:
    kind, _, low, high = FIELDS[name]
    if kind == "bool":
        if isinstance(value, str) and value.lower() in ("true", "1", "on", "false", "0", "off"):
            return value.lower() in ("true", "1", "on")
        if not isinstance(value, bool):
            raise ParamError(name, f"must be true or false, got {value!r:.40}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ParamError(name, f"must be a string, got {value!r:.40}")
        return value.strip().lower()
    if isinstance(value, str):
        try:
            value = int(value) if kind == "int" else float(value)
        except ValueError:
            raise ParamError(name, f"must be a{'n integer' if kind == 'int' else ' number'}, "
                                   f"got {value!r:.40}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParamError(name, f"must be a number, got {value!r:.40}")
    if kind == "int":
        if isinstance(value, float) and not value.is_integer():
            raise ParamError(name, f"must be a whole number, got {value}")
        value = int(value)
    elif not math.isfinite(value):
        raise ParamError(name, "must be a finite number")
    if not low <= value <= high:
        raise ParamError(name, f"must be between {low:g} and {high:g}, got {value:g}")
    return value if kind == "int" else float(value)


def parse(raw: dict[str, Any]) -> dict[str, Any]:
    """The resolved inputs (defaults filled in; a preset's shape replaces the shape
    fields, which count only for model "custom"), or ParamError naming the field."""
    if not isinstance(raw, dict):
        raise ParamError("body", "must be a JSON object")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise ParamError(unknown[0], f"unknown field; known: {', '.join(FIELDS)}")
    inputs = defaults()
    inputs.update({name: _typed(name, value) for name, value in raw.items()})
    if inputs["model"] in PRESETS:
        inputs.update({k: PRESETS[inputs["model"]][k] for k in SHAPE})
    elif inputs["model"] != "custom":
        raise ParamError("model", f"unknown model {inputs['model']!r:.40}; choose from "
                                  f"{', '.join([*PRESETS, 'custom'])}")
    if inputs["precision"] not in memorymodel.RECIPES:
        raise ParamError("precision", f"must be one of {', '.join(memorymodel.RECIPES)}")
    if inputs["gpu"] not in GPUS and not RUN_GPU.fullmatch(inputs["gpu"]):
        raise ParamError("gpu", f"unknown GPU {inputs['gpu']!r:.40}; choose from "
                                f"{', '.join(GPUS)}, or run:<id> for a runner's calibration")
    _check_rules(inputs)
    return inputs


def _check_rules(p: dict[str, Any]) -> None:
    if p["hidden"] % p["heads"]:
        raise ParamError("heads", f"hidden={p['hidden']} is not divisible by "
                                  f"heads={p['heads']}")
    if p["heads"] % p["tp"]:
        raise ParamError("tp", f"the tensor-parallel degree must divide heads={p['heads']} "
                               f"(each rank takes whole heads), got tp={p['tp']}")
    if p["pp"] > p["layers"]:
        raise ParamError("pp", f"needs at least one block per stage: pp={p['pp']} > "
                               f"layers={p['layers']}")
    world = p["dp"] * p["tp"] * p["pp"]
    if world > MAX_WORLD:
        raise ParamError("dp", f"dp x tp x pp = {world} GPUs; at most {MAX_WORLD}")
    per = p["dp"] * p["micro_batches"]
    if p["batch_size"] % per:
        raise ParamError("batch_size", f"must be divisible by dp x micro_batches = {per} "
                                       f"(every rank runs whole sequences), got "
                                       f"{p['batch_size']}")
    if p["zero"] == 3 and p["pp"] > 1:
        raise ParamError("zero", "ZeRO-3 with pipeline stages would gather every stage's "
                                 "weights again each micro-batch; use ZeRO-1 or 2 with pp > 1")
    wrong = activation_choices.check(p)
    if wrong:
        raise ParamError(*wrong)


@dataclass
class Hardware:
    """One GPU as the estimate uses it: compute, memory, and a link per collective."""

    name: str
    peak_flops: float  # the MFU denominator
    flops: float  # what the matmuls achieve
    hbm_bytes: float
    hbm_Bps: float
    links: dict[str, LinkFit]  # inside a node
    between_nodes: LinkFit | None = None
    gpus_per_node: int = 8
    op_s: float = 0.0  # per-operator overhead (a runner's CPU); 0 on a GPU: hidden
    notes: list[str] = field(default_factory=list)

    def link(self, op: str, span: int) -> tuple[LinkFit, str]:
        """The link a group spanning `span` consecutive ranks uses for `op`."""
        if self.between_nodes is not None and span > self.gpus_per_node:
            return self.between_nodes, "between nodes"
        return self.links[op], "in a node" if self.between_nodes is not None else "calibrated"


def preset_hardware(name: str, efficiency: float, memory_gb: float) -> Hardware:
    g = GPUS[name]
    nvlink = {op: LinkFit(g["alpha_s"], g["nvlink_busbw_Bps"]) for op in LINK_OPS}
    return Hardware(g["label"], g["peak_flops"], g["peak_flops"] * efficiency,
                    memory_gb * GB or g["hbm_bytes"], g["hbm_Bps"], nvlink,
                    LinkFit(g["alpha_s"] * 2, g["ib_busbw_Bps"]), g["gpus_per_node"])


def calibrated_hardware(label: str, cal: dict[str, Any], memory_gb: float,
                        device_model: str = "") -> Hardware:
    """A runner's measured calibration (a result's "calibration"): its GEMM FLOP/s, its
    per-operator overhead, its copy bandwidth and its links' alpha and bus bandwidth.
    A kind of collective it did not measure borrows another's fit (said in the notes);
    its memory is the matching GPU's, or memory_gb, or else 16 GB (said too)."""
    notes = []
    fits = {op: LinkFit(v["alpha_s"], v["busbw_Bps"]) for op, v in cal["links"].items()
            if op in LINK_OPS}
    if not fits:
        raise ParamError("gpu", f"{label} measured no collective: pick a run with 2 or "
                                "more ranks")
    for op in LINK_OPS:
        if op not in fits:
            lender = "all_reduce" if "all_reduce" in fits else sorted(fits)[0]
            fits[op] = fits[lender]
            notes.append(f"{op} priced with the calibration's {lender} fit (not measured)")
    known = [k for k in GPUS if k in device_model.lower().replace(" ", "")]
    memory = memory_gb * GB or (GPUS[known[0]]["hbm_bytes"] if known else 16 * GB)
    if not memory_gb and not known:
        notes.append("device memory assumed 16 GB (set memory_gb for this host)")
    return Hardware(label, cal["peak_flops"], cal["flops"], memory, cal["bandwidth_Bps"],
                    fits, None, op_s=cal["op_s"], notes=notes)
