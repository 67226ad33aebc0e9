"""Memory of sequence and context parallelism, predicted - plain arithmetic, no torch
(the terms as jobs/lab/predict/memory.py names them: n tokens, h hidden, e bytes an element,
t or c ranks, a heads).

Megatron sequence parallelism (strategies/sequence_parallel.py) saves per block, on n
tokens split t ways: the LayerNorms' inputs (2 of n*h) and statistics on n/t tokens
(tensor parallelism keeps them whole), each column-parallel region's all-gathered input
whole (2; Megatron itself keeps the shard and gathers again in backward) and tensor
parallelism's 12/t (q k v, attention output, GeLU input and output):
(2 + 14/t)*n*h*e + 4*(n/t) fp32 statistics + the attention kernel's log-sum-exp.

Ring attention (strategies/context_parallel.py) runs every token-wise layer on the rank's
n/c tokens (14 of n/c*h: LayerNorm inputs 2, attention input 1, scaled q 1, attention
output 1, MLP 9), and keeps through autograd every K,V block that passed (2*b*s*h: the
whole sequence's) and, per computed query x key chunk block of k = s/(2c) tokens (2c+1 of
them a rank), its scores and probabilities (2*b*a*k*k) and log-sum-exp, and for the
combination each block's output (b*k*h), its log-sum-exp copy and its weight.
"""

from __future__ import annotations

from jobs.lab.predict import memory

F32 = memory.F32


def sp_block_activations(n: int, h: int, heads: int, e: int, t: int) -> float:
    """One GPT block under Megatron sequence parallelism (see the doc)."""
    return (2 + 14 / t) * n * h * e + 4 * (n / t) * F32 + n * (heads // t) * F32


def sp_backward_working_set(n: int, h: int, e: int, t: int) -> float:
    """The MLP's backward: the incoming gradient's shard (n/t) all-gathered (n), the
    GeLU's gradients (4n/t) and the gathered input's gradient laid out for its
    reduce-scatter (n)."""
    return (2 + 5 / t) * n * h * e


def cp_block_activations(b: int, s: int, h: int, heads: int, e: int, c: int) -> float:
    """One GPT block of a ring-attention rank holding s/c tokens of b sequences."""
    n, k, blocks = b * s // c, s // (2 * c), 2 * c + 1
    token_wise = 14 * n * h * e + 4 * n * F32
    kv = 2 * b * s * h * e
    per_block = 2 * b * heads * k * k * e + b * heads * k * e  # scores, probabilities, lse
    combined = 2 * b * heads * k * e + b * k * h * e  # lse copy, weight, output
    return (token_wise + kv + blocks * (per_block + combined)
            + 2 * b * heads * k * e  # each query chunk's total log-sum-exp
            + k * k)  # the causal mask (bool)


def single_batch_peak(precision: str, kind: str, P: float, n: int, h: int, v: int, e: int,
                      blocks: float, work: float, inputs: bool, largest_update: int,
                      buffers: dict[str, float] | None = None) -> dict:
    """The step's peak of a rank running one micro-batch of n tokens through the whole
    stack (its blocks saving `blocks` bytes; `work` a block's backward working set):
    parameters and optimizer state held, plus the largest moment of backward
    (memory.peak's moments, as base.Strategy.peak_memory names them)."""
    state = memory.model_state(precision, P)
    head = memory.finish_activations(kind, n, h, v, e, inputs)
    acts = blocks + head + (memory.embed_activations(kind, n, h, e) if inputs else 0)
    grad_e = memory.RECIPES[precision]["grad"]
    moments = {
        "loss backward": {"activations": acts,
                          "loss gradient": memory.loss_gradient(kind, n, h, v, e)},
        "first block backward": {"activations": acts - head, "working set": work,
                                 "head gradients": memory.finish_params(kind, h, v)
                                 * grad_e},
        "backward end": {"grads": state["grads"], **(buffers or {})},
    }
    if precision == "bf16_adamw":
        moments["optimizer step"] = {"grads": state["grads"],
                                     "AdamW temporaries": 8 * largest_update}
    held = {"params": state["params"], "optimizer": state["optimizer"]}
    return {**memory.peak(held, moments), "model_state": state, "activations": acts,
            "one_micro_batch_activations": acts}
