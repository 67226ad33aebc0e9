"""The hook probe (jobs/lab/experiments/hooks.py): a wrapper's own Python, measured on the
wrapper itself over a model of tiny widths, priced per operator of the real step's census."""

from __future__ import annotations

import dataclasses
import math

import pytest
from lab_helpers import NCCL_LIKE, TINY, shared

from jobs.lab import strategies
from jobs.lab.components.census import OpCensus
from jobs.lab.components.context import Context
from jobs.lab.components.model import make_batch
from jobs.lab.experiments import hooks
from jobs.lab.experiments.training import spec_from
from jobs.lab.predict import calibration


def _operators(ctx: Context, name: str, spec) -> dict[str, int]:
    """Operators per phase of one step of the strategy (after a first, which initialises)."""
    strat = strategies.get(name)(ctx, spec)
    batch = make_batch(spec.cfg, spec.batch_size)
    strat.train_step(batch)
    census = OpCensus(ctx.timeline.phase)
    with census:
        strat.train_step(batch)
    return {ph: calibration.operators(v) for ph, v in census.profile()["phases"].items()}


def test_a_phase_s_own_work_is_its_span_less_the_spans_inside_it():
    # a torch schedule's span holds forward and backward spans; the census gives an
    # operator to the innermost open span, so each phase keeps only its own time
    events = [{"kind": "schedule", "t0": 1.0, "t1": 9.0},
              {"kind": "forward", "t0": 2.0, "t1": 4.0},
              {"kind": "backward", "t0": 5.0, "t1": 8.0},
              {"kind": "optimizer", "t0": 9.5, "t1": 10.0}]
    own = hooks.own_times(events, 12.0)
    assert own == pytest.approx({"schedule": 3.0, "forward": 2.0, "backward": 3.0,
                                 "optimizer": 0.5, "step": 3.5})
    assert sum(own.values()) == pytest.approx(12.0)


@pytest.mark.parametrize(("given", "tp"), [({"tp": 1, "world_size": 4}, 1),
                                          ({"tp": 2, "world_size": 8}, 2),
                                          ({"world_size": 2}, 2)])  # tp_dtensor: the world
def test_tiny_widths_keep_every_count(given, tp):
    spec = spec_from({**TINY, "seed": 0, "micro_batches": 2, **given})
    tiny = hooks.tiny_spec(spec)
    for field in ("layers", "heads", "kind", "dtype", "experts"):
        assert getattr(tiny.cfg, field) == getattr(spec.cfg, field)
    assert (tiny.batch_size, tiny.micro_batches, tiny.precision) == \
        (spec.batch_size, spec.micro_batches, spec.precision)
    assert tiny.cfg.hidden % (tiny.cfg.heads * tp) == 0 and tiny.cfg.vocab % tp == 0
    assert tiny.cfg.hidden < spec.cfg.hidden and tiny.params["hidden"] == tiny.cfg.hidden


def test_fsdp2_over_tiny_widths_runs_the_same_operators_and_its_hooks_are_never_negative(
        one_rank):
    spec = spec_from({**TINY, "seed": 0, "world_size": 1})
    # the same operators, phase by phase: FSDP2's hooks run as often over tiny widths
    assert _operators(one_rank, "fsdp2", spec) == \
        _operators(one_rank, "fsdp2", hooks.tiny_spec(spec))
    cal = calibration.Calibration(flops=1, peak_flops=1, op_s=1e-6, bandwidth=1e9)
    rate = hooks.probe(one_rank, cal, "fsdp2", spec, iters=2)
    assert {"forward", "backward", "optimizer"} <= set(rate)
    assert all(math.isfinite(v) and v >= 0 for v in rate.values())
    # the shapes the tiny step multiplies were probed, so that its GEMMs are priced
    assert cal.gemm_s and cal.attention_s
    # priced at more than any step takes, nothing is left for the hooks: none, not less
    dear = dataclasses.replace(cal, op_s=1.0)
    assert set(hooks.probe(one_rank, dear, "fsdp2", spec, iters=2).values()) == {0.0}


@pytest.fixture(scope="module")
def zero4(tmp_path_factory):
    """test_lab_runs.py's world-4 ZeRO run (shared: the same parameters and environment):
    every ZeRO strategy, fsdp2 among them."""
    params = {**TINY, "world_size": 4, "steps": 1, "warmup": 0, "bucket_cap_mb": 0.02}
    return shared(tmp_path_factory, "zero", params, env=NCCL_LIKE)


def test_only_a_wrapper_that_declares_hooks_is_probed_and_priced_with_them(zero4):
    assert zero4.rc == 0, zero4.stderr[-2000:]
    probed = zero4.result["calibration"]["hooks_per_op_s"]
    names = [s["strategy"] for s in zero4.result["strategies"]]
    assert "fsdp2" in names and len(names) > 1
    assert set(probed) == {n for n in names if strategies.get(n).hook_probe} == {"fsdp2"}
    assert {"forward", "backward"} <= set(probed["fsdp2"])
    for name in names:
        pred = zero4.strategy(name)["prediction"]
        assert ("hooks" in pred["terms_s"]) == (name == "fsdp2")
        assert sum(pred["terms_s"].values()) == pytest.approx(pred["step_time_s"])
    assert zero4.strategy("fsdp2")["prediction"]["terms_s"]["hooks"] >= 0
    # and each phase of the card's judgement holds its hooks
    for rank in zero4.strategy("fsdp2")["compute_per_rank"]:
        assert "hooks" in rank["phases"]["backward"]
