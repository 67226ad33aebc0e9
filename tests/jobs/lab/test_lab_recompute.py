"""Activation recomputation (the recompute experiment): the memory saved is real - the
peak the lab measures drops below single's in the same run, by what the formula says -
the hand-written and PyTorch's recomputations give the reference's gradients, and broken
ones are caught: an input not saved, parameter gradients lost, a rerun that draws
different dropout masks."""

from __future__ import annotations

import pytest
import torch
from lab_helpers import NCCL_LIKE, PLUGINS, TINY, launch, shared
from torch import nn
from torch.utils.checkpoint import checkpoint

from jobs.lab.catalogue import registry
from jobs.lab.predict import recompute
from jobs.lab.strategies.recompute import recomputed

ALL = ["single", "recompute_full", "recompute_selective", "torch_checkpoint_full",
       "torch_checkpoint_selective"]


def test_recomputation_saves_the_memory_the_formula_says_with_the_reference_gradients(
        tmp_path_factory):
    """test_lab_matrix's recompute-1 run (every strategy is the default): one rank, under
    the matrix's nccl-like process group."""
    run = shared(tmp_path_factory, "recompute", {**TINY, "steps": 1, "warmup": 0,
                                                  "strategies": ALL}, env=NCCL_LIKE)
    assert run.rc == 0, run.stderr[-3000:]
    by = {s["strategy"]: s for s in run.result["strategies"]}
    for name, s in by.items():
        c = s["correctness"]
        # the same operators rerun on the same inputs: the reference's numbers (0 here)
        assert c["passed"] and c["max_rel_error"] < 1e-6, (name, c["reason"])
        assert 0.9 <= s["memory"][0]["peak"]["ratio"] <= 1.1, (name, s["memory"][0]["peak"])
    single = by["single"]["memory"][0]["peak"]["measured"]
    for name in ("recompute_full", "torch_checkpoint_full"):
        peak = by[name]["memory"][0]["peak"]
        assert peak["measured"] < 0.85 * single, (name, peak["measured"], single)
        # the peak moved from the loss's backward to a rebuilt block's
        assert peak["formula"]["peak_at"] in ("first block backward", "last block backward")
        assert by["single"]["memory"][0]["peak"]["formula"]["peak_at"] == "loss backward"
        saved = by[name]["versus_single"]["peak_bytes_saved"]
        assert 0.9 <= saved["ratio"] <= 1.1, (name, saved)
        extra = by[name]["extra"][0]
        assert extra["kept_per_block_bytes"] == 8 * 16 * 32 * 4  # n*h*e: the input only
        assert extra["recomputed"] == {"block forwards": 2}
    for name in ("recompute_selective", "torch_checkpoint_selective"):
        # SDPA keeps no s^2 matrix: only its log-sum-exp (n*heads*4 bytes a block) goes
        saved = by[name]["versus_single"]["peak_bytes_saved"]
        assert saved["predicted"] == 2 * 8 * 16 * 4 * 4
        assert abs(saved["measured"] - saved["predicted"]) <= 0.1 * saved["predicted"], saved
    for name in ("recompute_full", "torch_checkpoint_full", "recompute_selective",
                 "torch_checkpoint_selective"):  # kept when forward ends (saved-tensor meter)
        kept = by[name]["versus_single"]["activation_bytes_saved"]
        assert abs(kept["ratio"] - 1) < 0.01, (name, kept)
    # the recomputed forwards are in the census of backward: more backward compute
    for name in ("recompute_full", "torch_checkpoint_full"):
        assert by[name]["versus_single"]["time_added_s"]["predicted_backward"] > 0


def test_a_recomputation_that_forgets_its_input_or_its_parameter_gradients_is_caught(
        tmp_path):
    run = launch("recompute", {**TINY, "steps": 1, "warmup": 0,
                               "strategies": ["recompute_full", "recompute_selective"]},
                 tmp_path, env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "recompute_broken.py")})
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["failed"] == ["recompute_full", "recompute_selective"]
    forgets = run.strategy("recompute_full")["correctness"]
    assert forgets["reason"].startswith("grad") and forgets["max_grad_rel_error"] > 0.01
    loses = run.strategy("recompute_selective")["correctness"]
    assert not loses["passed"] and not loses["all_params_have_grad"]


class DropoutBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.drop = nn.Linear(8, 8), nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(torch.tanh(self.fc(x)))


def _grads(blk: nn.Module, how) -> list[torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(4, 8, requires_grad=True)
    torch.manual_seed(2)
    blk.zero_grad(set_to_none=True)
    y = how(x)
    torch.randn(100)  # whatever runs between forward and backward moves the RNG on
    (y * y).sum().backward()
    return [x.grad, *(p.grad for p in blk.parameters())]


@pytest.mark.parametrize("keeps_rng", [True, False])
def test_the_rerun_draws_the_same_dropout_masks_only_when_the_rng_state_is_kept(keeps_rng):
    torch.manual_seed(0)
    blk = DropoutBlock()
    want = _grads(blk, blk)
    mine = _grads(blk, lambda x: recomputed(blk, x, preserve_rng=keeps_rng))
    same = all(torch.equal(a, b) for a, b in zip(want, mine, strict=True))
    assert same is keeps_rng
    if keeps_rng:  # PyTorch's own, keeping the state the same way
        theirs = _grads(blk, lambda x: checkpoint(blk, x, use_reentrant=False))
        assert all(torch.equal(a, b) for a, b in zip(want, theirs, strict=True))


def test_selective_recomputation_needs_attention_and_full_needs_only_the_input():
    with pytest.raises(registry.ParamError, match="no attention"):
        registry.validate("recompute", {"model": "mlp", "strategies": ["recompute_selective"]})
    assert registry.validate("recompute", {"model": "mlp", "world_size": 2,
                                           "strategies": ["single", "recompute_full"]})
    with pytest.raises(registry.ParamError, match="batch_size"):
        registry.validate("recompute", {"world_size": 3})
    # one block keeps n*h*e bytes under full recomputation, all 16 n*h*e + stats without
    assert recompute.kept_per_block("gpt", "full", 10, 8, 2, 2) == 10 * 8 * 2
    assert recompute.saved("mlp", "full", 3, 10, 8, 2, 2) == 3 * 8 * 10 * 8 * 2
