"""OpenAPI paths of the what-if calculator. Its inputs, their ranges and defaults come
from jobs/lab/predict/whatif.py, the module that checks them."""

from __future__ import annotations

from app.web.api.calculator import MAX_BODY
from app.web.api.openapi.schema import ERRORS, body, json_response, query
from jobs.lab.predict import memory, whatif

OBJ = {"type": "object"}
TYPES = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}
DESCRIPTIONS = {
    "model": "a preset (" + ", ".join(whatif.PRESETS) + ") or custom; a preset's shape "
             "replaces layers, hidden, heads, seq_len, vocab and tied",
    "tied": "the LM head is the token embedding (custom models)",
    "batch_size": "global batch in sequences per optimizer step; divisible by dp x "
                  "micro_batches",
    "micro_batches": "micro-batches per step (gradient accumulation, pipeline slots)",
    "precision": "training recipe: " + ", ".join(memory.RECIPES),
    "gpu": ", ".join(whatif.GPUS) + ", or run:<id>: that run's calibration "
           "(GET /api/v1/calculator/gpus lists them)",
    "dp": "data-parallel degree", "tp": "tensor-parallel degree; divides heads",
    "pp": "pipeline stages; at most layers", "zero": "ZeRO stage over the DP ranks (0-3)",
    "efficiency": "fraction of the GPU's peak the matmuls reach (presets only)",
    "overlap": "DP/ZeRO collectives hide behind backward where they can",
    "memory_gb": "device memory in GB; 0 = the GPU's own",
}


def _schema(name: str) -> dict:
    kind, default, low, high = whatif.FIELDS[name]
    out = {"type": TYPES[kind], "default": default,
           "description": DESCRIPTIONS.get(name, name.replace("_", " "))}
    if low is not None:
        out.update(minimum=low, maximum=high)
    return out


def paths() -> dict:
    fields = {name: _schema(name) for name in whatif.FIELDS}
    answer = json_response(OBJ, "inputs (resolved), model, parallel, gpu, memory (the "
                                "heaviest rank's parts in bytes, fits, margin; per_stage), "
                                "time (step_time_s, terms_s, dominant, tokens_per_s), "
                                "bubble_fraction, communication (per kind: bytes, count, "
                                "ranks, link, time_s), mfu, assumptions, lab (ok, "
                                "experiment, params, why)")
    summary = "What-if: per-rank memory, step time, communication and MFU of a configuration"
    return {
        "/api/v1/calculator": {
            "get": {"summary": summary,
                    "parameters": [query(name, schema) for name, schema in fields.items()],
                    "responses": {"200": answer, **ERRORS}},
            "post": {"summary": summary + f" (a JSON object of at most {MAX_BODY} bytes)",
                     "requestBody": body({"type": "object", "additionalProperties": False,
                                          "properties": fields}),
                     "responses": {"200": answer, **ERRORS,
                                   "413": json_response(OBJ, "Body too large")}}},
        "/api/v1/calculator/gpus": {
            "get": {"summary": "GPUs a calculation may name: presets and the runners' "
                               "calibrations",
                    "responses": {"200": json_response(OBJ), **ERRORS}}},
    }
