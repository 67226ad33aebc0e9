"""Memory per rank, predicted - plain arithmetic, no torch (docs/EXPERIMENTS.md, *Memory*).

Model state, bytes per parameter (the ZeRO paper's, K = optimizer bytes):

    recipe        weights  gradients  optimizer state
    fp32_sgd         4         4       4 (momentum)
    bf16_adamw       2         2      12 (fp32 master 4, Adam m 4, v 4)

    DP (2+2+12)P, ZeRO-1 (2+2+12/d)P, ZeRO-2 (2+(2+12)/d)P, ZeRO-3 16P/d  (bf16_adamw)
    DP 12P,       ZeRO-1 (4+4+4/d)P,  ZeRO-2 (4+(4+4)/d)P,  ZeRO-3 12P/d  (fp32_sgd)

Activations saved for backward, per transformer block and micro-batch of n = b*s tokens
(Korthikanti et al. 2022, "Reducing activation recomputation", without the terms this
model does not have): their 34*s*b*h bytes at 2 bytes an element count two dropout masks
(1 byte each; this model has no dropout) and, with FlashAttention-style kernels (SDPA),
no a*s^2 score matrix. What is left is 16 elements of n*h:

    LayerNorm inputs 2, attention input 1, q k v 3, attention output 1 (it is also the
    output projection's input: SDPA returns it laid out so that the reshape is a view),
    MLP input 1, GeLU input 4, GeLU output 4

plus, in fp32 whatever the recipe, each LayerNorm's mean and 1/std (n each) and the
attention kernel's log-sum-exp (n per head). Tensor parallelism over t splits q, k, v,
the attention output and the MLP's 8 (12/t) and keeps the LayerNorms' (4): Korthikanti's
10 + 24/t bytes, less the masks. The MLP stack's block saves 9 (input 1, GeLU in 4, out 4).

The peak of a step is the state held throughout plus the largest of a few moments of
backward (its first op, the loss's: every activation and the loss's gradient; its first
block: the activations less the head's, and the block's working set; a later
micro-batch's backward: the gradients accumulated so far and the activations still held;
its end: every gradient and whatever buffers are in flight) - each strategy names its own
buffers (DDP's and the bucketed DP's flat buckets, ZeRO's shards and staging, FSDP2's
unsharded units, a pipeline stage's sends), so the card shows what the memory is.
"""

from __future__ import annotations

RECIPES = {
    "fp32_sgd": {"param": 4, "grad": 4, "optimizer": 4, "dtype": "float32"},
    "bf16_adamw": {"param": 2, "grad": 2, "optimizer": 12, "dtype": "bfloat16"},
}
F32, I64 = 4, 8  # LayerNorm statistics, log-sum-exp and log-probabilities; token ids


def element_bytes(precision: str) -> int:
    return RECIPES[precision]["param"]


def model_state(precision: str, P: float, *, stage: int = 0, d: int = 1) -> dict[str, float]:
    """Weights, gradients and optimizer state per rank: ZeRO stage 0 (plain DP), 1, 2, 3."""
    r = RECIPES[precision]
    parts = {"params": r["param"] * P, "grads": r["grad"] * P, "optimizer": r["optimizer"] * P}
    if stage >= 1:
        parts["optimizer"] /= d
    if stage >= 2:
        parts["grads"] /= d
    if stage >= 3:
        parts["params"] /= d
    return {**parts, "total": sum(parts.values())}


def block_activations(kind: str, n: int, h: int, heads: int, e: int, t: int = 1) -> float:
    """Bytes one block saves for backward, for n tokens, split t ways (see the doc)."""
    if kind != "gpt":
        return 9 * n * h * e
    return (4 + 12 / t) * n * h * e + 4 * n * F32 + n * (heads // t) * F32


def embed_activations(kind: str, n: int, h: int, e: int) -> float:
    """The first stage: token ids (GPT's embedding gradient needs them), or the input the
    MLP's first linear saves."""
    return n * I64 if kind == "gpt" else n * h * e


def finish_activations(kind: str, n: int, h: int, v: int, e: int,
                       targets: bool = True) -> float:
    """The last stage: final LayerNorm input (+ statistics), the head's input, and the
    loss's: fp32 log-probabilities and targets (GPT); the output and the target (MLP).
    targets=False: they are the caller's batch, not a copy."""
    if kind != "gpt":
        return (2 + targets) * n * h * e
    return 2 * n * h * e + 2 * n * F32 + n * v * F32 + targets * n * I64


def finish_params(kind: str, h: int, v: int) -> int:
    """Parameters of the last stage's head (and final LayerNorm): their gradients are
    backward's first."""
    return h * v + 2 * h if kind == "gpt" else h * h + h


def backward_working_set(n: int, h: int, e: int, t: int = 1) -> float:
    """What a block's backward adds to its saved activations at its widest, in the MLP:
    the gradient flowing into the block (n*h) and the GeLU's input gradient (4nh/t)
    beside its output gradient (4nh/t, which replaces the GeLU output, already freed)."""
    return (1 + 4 / t) * n * h * e


def loss_gradient(kind: str, n: int, h: int, v: int, e: int) -> float:
    """Backward's first allocations: the gradient of the log-probabilities (fp32) and of
    the logits (the model's dtype) - or of the MLP's output."""
    return n * v * (F32 + e) if kind == "gpt" else 2 * n * h * e


def activations(kind: str, layers: int, n: int, h: int, heads: int, v: int, e: int, *,
                t: int = 1, first: bool = True, last: bool = True,
                inputs: bool = True) -> float:
    """Everything one micro-batch of n tokens saves on a rank holding `layers` blocks
    (inputs=False: the first stage's saved input is the caller's batch, not a copy)."""
    total = layers * block_activations(kind, n, h, heads, e, t)
    total += embed_activations(kind, n, h, e) if first and inputs else 0
    total += finish_activations(kind, n, h, v, e, inputs) if last else 0
    return total


def peak(held: dict[str, float], moments: dict[str, dict[str, float]]) -> dict:
    """State held throughout the step plus the largest moment: {terms, peak_at, total}."""
    at = max(moments, key=lambda k: sum(moments[k].values()))
    return {"held": held, "transient": moments[at], "peak_at": at,
            "total": sum(held.values()) + sum(moments[at].values()),
            "moments": {k: sum(v.values()) for k, v in moments.items()}}
