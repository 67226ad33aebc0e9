"""Runners' own calibrations, and the what-if calculator's answer that can use them.

Every training experiment measures the host it ran on before timing anything (its
result's "calibration": GEMM FLOP/s, per-operator overhead, copy bandwidth, each
collective's alpha and bus bandwidth). The calculator offers, per runner, the latest
SUCCEEDED run that has one as a "GPU" (``run:<id>``), so a what-if is priced on hardware
you own.

A result comes from a runner: its calibration is checked field by field before use, and
one that is not usable is not offered (asked for by id, it is a 422 naming "gpu").
"""

from __future__ import annotations

import math
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Invalid
from app.journal.runs import SUCCEEDED
from app.models import Run, Runner
from jobs.lab.catalogue import registry
from jobs.lab.predict import estimate, whatif

TRAINING = ("data_parallel", "pipeline", "tensor_parallel", "zero")  # they calibrate
SCAN = 200  # newest successful training runs looked at for the list of calibrations


def _number(value: Any, low: float, high: float = math.inf) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and low <= value <= high)


def usable(cal: Any) -> dict | None:
    """The calibration's fields the calculator uses, when every one is a sane number
    (and at least one collective was measured); else None."""
    if not isinstance(cal, dict):
        return None
    top = {"flops": 1.0, "peak_flops": 1.0, "bandwidth_Bps": 1.0, "op_s": 0.0}
    if not all(_number(cal.get(k), low) for k, low in top.items()):
        return None
    links = cal.get("links")
    fits = {op: {"alpha_s": x["alpha_s"], "busbw_Bps": x["busbw_Bps"]}
            for op, x in (links.items() if isinstance(links, dict) else ())
            if op in whatif.LINK_OPS and isinstance(x, dict)
            and _number(x.get("alpha_s"), 0.0, 10.0) and _number(x.get("busbw_Bps"), 1.0)}
    if not fits or cal["op_s"] > 1.0:
        return None
    return {**{k: float(cal[k]) for k in top}, "links": fits}


def _load(session: Session, run_id: int) -> tuple[dict | None, str, str]:
    """(usable calibration or None, runner name, device model) of a successful run."""
    row = session.execute(
        sa.select(Run.result["calibration"], Run.result["environment"]["device_model"],
                  Runner.name)
        .join(Runner, Run.runner_id == Runner.id)
        .where(Run.id == run_id, Run.status == SUCCEEDED)).first()
    if row is None:
        return None, "", ""
    device = row[1] if isinstance(row[1], str) else ""
    return usable(row[0]), row[2], device[:100]


def label(run_id: int, runner: str, device: str) -> str:
    on = f", {device}" if device else ""
    return f"calibration of runner {runner} from run {run_id}{on}"


def offered(session: Session) -> list[dict]:
    """Per runner, its latest successful training run with a usable calibration."""
    rows = session.execute(
        sa.select(Run.id, Run.runner_id)
        .where(Run.status == SUCCEEDED, Run.experiment.in_(TRAINING),
               Run.runner_id.is_not(None))
        .order_by(Run.id.desc()).limit(SCAN))
    seen, out = set(), []
    for run_id, runner_id in rows:
        if runner_id in seen:
            continue
        cal, runner, device = _load(session, run_id)
        if cal is not None:
            seen.add(runner_id)
            out.append({"gpu": f"run:{run_id}", "run_id": run_id, "runner": runner,
                        "label": label(run_id, runner, device)})
    return out


def hardware(session: Session, inputs: dict) -> whatif.Hardware:
    """The GPU the inputs name: a preset, or a run's calibration."""
    if inputs["gpu"] in whatif.GPUS:
        return whatif.preset_hardware(inputs["gpu"], inputs["efficiency"],
                                      inputs["memory_gb"])
    run_id = int(inputs["gpu"].removeprefix("run:"))
    cal, runner, device = _load(session, run_id)
    if cal is None:
        raise Invalid(f"gpu: run {run_id} is not a successful run with a usable "
                      "calibration (training experiments record one)", "gpu")
    try:
        return whatif.calibrated_hardware(label(run_id, runner, device), cal,
                                          inputs["memory_gb"], device)
    except registry.ParamError as exc:
        raise Invalid(f"{exc.param}: {exc.message}", exc.param) from None


def calculate(session: Session, raw: dict) -> dict:
    """The calculator's whole answer for what a request sent (a JSON body or a query
    string), or Invalid naming the field."""
    try:
        inputs = whatif.parse(raw)
    except registry.ParamError as exc:
        raise Invalid(f"{exc.param}: {exc.message}", exc.param) from None
    answer = estimate.estimate(inputs, hardware(session, inputs))
    return {"inputs": inputs, **answer}
