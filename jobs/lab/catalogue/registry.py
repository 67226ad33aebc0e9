"""The experiment catalogue: names, descriptions, parameter schemas, validation.

The web app and the CLI import this module to build forms and to refuse bad
parameters before anything is launched, so it must stay importable without
torch: plain data and plain functions only. The schemas themselves are in
jobs/lab/catalogue/schemas.py (one strategy at a time) and combined.py (strategies combined).

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

from jobs.lab.catalogue import combined, schemas

SCHEMA_VERSION = 1


class ParamError(ValueError):
    """A parameter was refused; ``param`` names it, ``message`` says why."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


class UnknownExperiment(KeyError):
    """No experiment of that name is in the catalogue."""


EXPERIMENTS: dict[str, dict[str, Any]] = {**schemas.EXPERIMENTS, **combined.EXPERIMENTS}


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


def coerce(name: str, spec: dict[str, Any], value: Any) -> Any:
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
    resolved = resolve(name, EXPERIMENTS[name]["params"], params)
    _check_rules(name, resolved)
    return resolved


def resolve(name: str, schema: dict[str, dict[str, Any]], params: Any) -> dict[str, Any]:
    """Defaults filled in and every given value checked against its own spec (type,
    bounds, choices); the rules between parameters are the caller's."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ParamError("params", "must be a JSON object")
    unknown = sorted(set(params) - set(schema))
    if unknown:
        raise ParamError(unknown[0], f"not a parameter of {name}; known: {sorted(schema)}")
    resolved = {k: copy.deepcopy(v["default"]) for k, v in schema.items()}
    for key, value in params.items():
        resolved[key] = coerce(key, schema[key], value)
    return resolved


def validate_declared(spec: dict[str, Any], params: Any) -> dict[str, Any]:
    """Resolve ``params`` for one of the owner's own experiments (catalogue/own.py: its
    declaration, already checked): the same types and bounds as the lab's, and the one
    rule every run has, enough ranks. Raises ParamError."""
    resolved = resolve(spec["name"], spec["params"], params)
    least = spec.get("min_world_size", 1)
    if resolved["world_size"] < least:
        raise ParamError("world_size", f"{spec['name']} needs at least {least} ranks")
    return resolved


INTERLEAVED = ("interleaved_1f1b", "torch_interleaved_1f1b", "torch_zero_bubble")


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
        interleaved = [s for s in p["strategies"] if s in INTERLEAVED]
        if interleaved and p["layers"] < w * p["virtual_stages"]:
            raise ParamError("layers", f"{interleaved[0]} needs a layer per virtual stage: "
                                       f"layers={p['layers']} < world_size*virtual_stages="
                                       f"{w * p['virtual_stages']}")
        if interleaved and m % w:
            raise ParamError("micro_batches", f"{interleaved[0]} runs the micro-batches in "
                                              f"groups of world_size={w}: micro_batches={m} "
                                              "is not a multiple")
    if name == "tensor_parallel":
        if p["heads"] % w:
            raise ParamError("heads", f"heads={p['heads']} is not divisible by the "
                                      f"tensor-parallel degree world_size={w}")
    _check_combined(name, p)


def _divides(param: str, value: int, by: int, what: str) -> None:
    if value % by:
        raise ParamError(param, f"{param}={value} is not divisible by {what}={by}")


def _check_combined(name: str, p: dict[str, Any]) -> None:
    """The rules of combined.py's experiments."""
    w, chosen = p["world_size"], p.get("strategies", [])
    if name == "mesh":
        tp, pp = p["tp"], p["pp"]
        needs = {"dp_tp": tp, "torch_dp_tp": tp, "dp_pp": pp, "torch_dp_pp": pp,
                 "dp_pp_tp": tp * pp}
        for s in chosen:
            if s in needs:
                _divides("world_size", w, needs[s], f"{s}'s model-parallel degree")
                dp = w // needs[s]
                m = p["micro_batches"] if s in ("dp_pp", "torch_dp_pp", "dp_pp_tp") else 1
                _divides("batch_size", p["batch_size"], dp * m,
                         f"{s}'s data-parallel degree x micro-batches")
        if any(s in chosen for s in ("dp_tp", "torch_dp_tp", "dp_pp_tp")):
            _divides("heads", p["heads"], tp, "tp")
        if any(s in chosen for s in ("dp_pp", "torch_dp_pp", "dp_pp_tp")) and p["layers"] < pp:
            raise ParamError("layers", f"needs at least one layer per stage: layers="
                                       f"{p['layers']} < pp={pp}")
        if any(s in chosen for s in ("dp_pp", "torch_dp_pp", "dp_pp_tp")) \
                and p["micro_batches"] < pp:
            raise ParamError("micro_batches", f"the meshes' 1F1B needs micro_batches >= pp="
                                              f"{pp}, got {p['micro_batches']}")
    if name == "recompute":  # more than one rank: data parallel, the batch split d ways
        _divides("batch_size", p["batch_size"], w, "world_size")
        selective = [s for s in chosen if s.endswith("_selective")]
        if selective and p["model"] != "gpt":
            raise ParamError("strategies", f"{selective[0]} recomputes the attention core: "
                                           f"model={p['model']} has no attention")
    if name == "sequence":
        if any(s.startswith("tp") or s.startswith("torch_tp") for s in chosen):
            _divides("heads", p["heads"], w, "world_size")
        _divides("seq_len", p["seq_len"], w if "cp_ring" not in chosen else 2 * w,
                 "world_size" if "cp_ring" not in chosen else "2*world_size")
    if name == "experts":
        _divides("experts", p["experts"], w, "world_size")
        _divides("batch_size", p["batch_size"], w, "world_size")
        if p["top_k"] > p["experts"]:
            raise ParamError("top_k", f"top_k={p['top_k']} exceeds experts={p['experts']}")
