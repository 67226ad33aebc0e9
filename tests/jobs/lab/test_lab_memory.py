"""The memory model against what the model saves and what storage is alive, and the
bf16 recipe's optimizer against PyTorch's (in process, no ranks)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from lab_helpers import ROOT

from jobs.lab.components.census import LiveStorage
from jobs.lab.components.instrument import SavedActivations
from jobs.lab.components.model import ModelConfig, build_model, make_batch
from jobs.lab.components.optim import SGD, adamw_, update_shard
from jobs.lab.predict import memory


@pytest.mark.parametrize("kind", ["gpt", "mlp"])
@pytest.mark.parametrize("dtype,e", [("float32", 4), ("bfloat16", 2)])
def test_activation_formula_is_what_the_model_saves(kind, dtype, e):
    L, h, heads, s, v, B = 2, 64, 4, 32, 128, 4
    cfg = ModelConfig(kind=kind, layers=L, hidden=h, heads=heads, seq_len=s, vocab=v,
                      dtype=dtype)
    model = build_model(cfg)
    batch = make_batch(cfg, B)
    meter = SavedActivations(list(model.parameters()))
    with meter:
        x = model.embed(batch.inputs)
        for blk in model.blocks.values():
            x = blk(x)
        held = meter.current
    n = B * s
    expected = L * memory.block_activations(kind, n, h, heads, e)
    embed = memory.embed_activations(kind, n, h, e)
    # the embedding's saved ids (or input) are the batch's storage, which the meter counts
    assert held - embed == pytest.approx(expected, rel=0.01)
    # 16 elements of n*h per GPT block (Korthikanti's 34 bytes at 2 bytes, less two
    # dropout masks), 9 per MLP block, plus fp32 statistics
    assert memory.block_activations(kind, n, h, heads, e) // (n * h * e) == \
        (16 if kind == "gpt" else 9)


def test_live_storage_follows_allocations_frees_and_in_place_resizes():
    with LiveStorage() as live:
        a = torch.ones(1000)  # 4000 bytes
        b = a.view(10, 100)  # a view: nothing new
        live.mark()
        c = torch.zeros(500)  # +2000
        del c
        st = torch.empty(250).untyped_storage()  # FSDP2 frees and refills storage in place
        st.resize_(0)
        st.resize_(4000)
    assert live.start_bytes == 4000
    assert live.peak_bytes == 4000 + 4000
    del a, b, st


FROZEN = """
import gc, torch
from jobs.lab.components.census import LiveStorage, freeze_startup
old = torch.ones(1000)  # alive before the freeze: gc.get_objects() will not list it
freeze_startup()
assert not any(o is old for o in gc.get_objects()), "not frozen"
with LiveStorage() as live:
    live.mark()
    view = old[:500]  # an operator hands out a view of storage alive before the window
    new = torch.zeros(250)  # +1000
assert (live.start_bytes, live.peak_bytes) == (0, 1000), (live.start_bytes, live.peak_bytes)
print("frozen ok")
"""


def test_storage_frozen_at_start_up_is_still_alive_before_the_window():
    """training.run freezes what start-up left alive (gc.freeze), which gc.get_objects()
    then no longer lists: LiveStorage must still know those tensors were there before."""
    proc = subprocess.run([sys.executable, "-c", FROZEN], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "frozen ok" in proc.stdout


def test_sgd_is_torch_sgd_bit_for_bit_and_leaves_out_what_has_no_gradient():
    torch.manual_seed(0)
    ws = [torch.randn(16, 8), torch.randn(8), torch.randn(3)]
    mine = [torch.nn.Parameter(w.clone()) for w in ws]
    ref = [torch.nn.Parameter(w.clone()) for w in ws]
    opt, ref_opt = SGD(mine), torch.optim.SGD(ref, lr=0.05, momentum=0.9)
    for step in range(4):
        for i, (a, b) in enumerate(zip(mine, ref, strict=True)):
            # the last parameter gets its first gradient only at the third step
            g = None if i == 2 and step < 2 else torch.randn_like(a)
            a.grad, b.grad = g, None if g is None else g.clone()
        opt.step()
        ref_opt.step()
        assert all(torch.equal(a, b) for a, b in zip(mine, ref, strict=True))
    assert all(torch.equal(opt.state[a]["momentum_buffer"], ref_opt.state[b]["momentum_buffer"])
               for a, b in zip(mine, ref, strict=True))
    opt.zero_grad()
    assert all(p.grad is None for p in mine)


LEAN = """
import sys, torch
from jobs.lab import strategies
from jobs.lab.components.census import LiveStorage, OpCensus
from jobs.lab.experiments import collectives, mfu, roofline, training
from jobs.lab.components.optim import make_optimizer
HAND = ["single", "dp_naive", "dp_bucket", "naive_mp", "gpipe", "1f1b", "tp_megatron",
        "zero1", "zero2", "zero3", "interleaved_1f1b", "dp_tp", "dp_pp", "dp_pp_tp",
        "recompute_full", "recompute_selective", "tp_sequence", "cp_ring", "ep_alltoall"]
assert not any(strategies.get(name).builtin for name in HAND)
model = torch.nn.Linear(8, 8)
opt = make_optimizer(list(model.parameters()), "fp32_sgd")
with OpCensus(), LiveStorage():
    for _ in range(2):
        model(torch.ones(2, 8)).sum().backward()
        opt.step()
print(sorted(m for m in ("torch._dynamo", "torch.distributed.tensor") if m in sys.modules))
"""


def test_a_run_of_hand_written_strategies_never_imports_dynamo():
    """torch._dynamo costs ~2 s of CPU on every rank (with inductor and sympy): torch.optim's
    constructor and a dispatch mode's default wrapper import it; the lab uses neither.
    Only PyTorch's own strategies do (training.run imports it for them, before its freeze)."""
    proc = subprocess.run([sys.executable, "-c", LEAN], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "['torch.distributed.tensor']"  # the TP modules'


def test_adamw_is_torch_adamw_and_update_shard_keeps_bf16_weights_with_fp32_masters():
    torch.manual_seed(0)
    w = torch.randn(16, 8)
    mine, ref = w.clone(), torch.nn.Parameter(w.clone())
    opt = torch.optim.AdamW([ref], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            foreach=False)
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for step in range(1, 4):
        g = torch.randn_like(w)
        adamw_(mine, g, m, v, step)
        ref.grad = g.clone()
        opt.step()
    assert torch.allclose(mine, ref.detach(), rtol=1e-6, atol=1e-7)
    assert torch.allclose(m, opt.state[ref]["exp_avg"]) and \
        torch.allclose(v, opt.state[ref]["exp_avg_sq"])
    p, state = w.to(torch.bfloat16), {}
    update_shard("bf16_adamw", state, p, torch.randn(16, 8).to(torch.bfloat16), 1)
    assert p.dtype == torch.bfloat16 and state["master"].dtype == torch.float32
    assert torch.equal(p, state["master"].to(torch.bfloat16))
    assert {k: t.numel() * t.element_size() for k, t in state.items()} == \
        {"master": 512, "exp_avg": 512, "exp_avg_sq": 512}  # 12 bytes per parameter
