"""Recomputation beside the reference: what each recomputing strategy saves in memory
and adds in time, measured against single in the same run and predicted from the two
strategies' own formulas and censuses (recomputed forwards are in the census of
backward). Only at world_size 1, where single and the strategy run the same tokens on
the same rank; with more ranks the strategies are data parallel and single is not
their baseline.

Two measured savings: the peak (live storage, the allocator) and the activations kept
when forward ends (the saved-tensor meter, read there by the strategy: its own peak is
later, once a block is rebuilt inside backward)."""

from __future__ import annotations

from typing import Any

RECOMPUTING = ("recompute_full", "recompute_selective", "torch_checkpoint_full",
               "torch_checkpoint_selective")


def _ratio(measured: float, predicted: float) -> float | None:
    return measured / predicted if predicted else None


def _backward_s(entry: dict) -> float:
    """Rank 0's priced backward compute at a whole core: what its census holds. (The
    price in the entry is divided by the share of a core the rank got while timed, which
    differs between two strategies on a busy host and is no part of what recomputing
    adds.)"""
    phases = entry["compute_per_rank"][0]["phases"]
    share = min((entry["prediction"].get("cpu_share_per_rank") or [1.0])[0], 1.0)
    return sum(phases.get("backward", {}).values()) * max(share, 1e-3)


def versus(entry: dict, single: dict) -> dict[str, Any]:
    mem, ref = entry["memory"][0], single["memory"][0]
    peak = {"measured": ref["peak"]["measured"] - mem["peak"]["measured"],
            "predicted": ref["peak"]["predicted"] - mem["peak"]["predicted"]}
    # single's saved tensors peak when forward ends; the strategy reads the meter there
    mine = entry["extra"][0]["kept_after_forward_bytes"] if entry["extra"] else None
    kept = {"measured": ref["saved_activation_peak_bytes"] - mine if mine is not None else None,
            "predicted": ref["predicted_activation_bytes"] - mem["predicted_activation_bytes"]}
    kept["ratio"] = _ratio(kept["measured"], kept["predicted"]) if mine is not None else None
    step = {"measured": entry["step_time_s"]["median"] - single["step_time_s"]["median"],
            "predicted": entry["prediction"]["step_time_s"] - single["prediction"]["step_time_s"],
            "predicted_backward": _backward_s(entry) - _backward_s(single)}
    base = single["step_time_s"]["median"]
    return {"peak_bytes_saved": {**peak, "ratio": _ratio(peak["measured"], peak["predicted"]),
                                 "fraction_of_single": peak["measured"]
                                 / ref["peak"]["measured"]},
            "activation_bytes_saved": kept,
            "time_added_s": {**step, "ratio": _ratio(step["measured"], step["predicted"]),
                             "fraction_of_single": step["measured"] / base if base else None,
                             "predicted_fraction": step["predicted"]
                             / single["prediction"]["step_time_s"]}}


def add_versus_single(entries: list[dict]) -> None:
    """Each recomputing entry gets ``versus_single`` when single ran beside it, passed,
    and both ran on one rank."""
    single = next((e for e in entries if e["strategy"] == "single"
                   and e["correctness"]["passed"]), None)
    if single is None:
        return
    for e in entries:
        if e["strategy"] in RECOMPUTING and e["correctness"]["passed"] and \
                e["ranks"] == single["ranks"] == 1:
            e["versus_single"] = versus(e, single)
