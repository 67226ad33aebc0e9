"""Activation recomputation's memory, predicted - plain arithmetic, no torch.

A block keeps, between its forward and its backward (memory.py's terms, n = b*s tokens
of one rank, e bytes an element):

    none        every activation backward needs: memory.block_activations
                (16*n*h*e + 4*n*4 + a*n*4 for the GPT block, 9*n*h*e for the MLP block)
    full        its input only: n*h*e (Korthikanti's 2*s*b*h at e = 2)
    selective   all but the attention core's own: the core (softmax(QK^T)V) is rebuilt
                from q, k, v - which the projections' outputs keep anyway - so what it
                drops is what only the core holds. Korthikanti's core holds 5*a*s^2*b
                bytes (scores, softmax, dropout mask and output); this model's core is
                one fused SDPA kernel (FlashAttention on GPU, its CPU port on CPU) that
                never materializes the s^2 matrix - it recomputes it inside its own
                backward - and saves only its output (the projection's input, kept) and
                its log-sum-exp: a*n*4 bytes. Selective recomputation saves exactly that.

The peak moves. Without recomputation it is backward's start (every activation and the
loss's gradient). With full recomputation each block's backward holds its activations
rebuilt beside the kept inputs (and, by hand, the rebuilt output the nested backward
starts from: n*h*e): at the first block backward runs, with every kept input; at the
last, with every gradient but the embedding's - whichever is larger (the last, once the
blocks' gradients outweigh their kept inputs). So the peak does not drop by L blocks'
activations but by the difference of those moments (step_peak).

Also the sharding view's rule for the four strategies (placement_rule).
"""

from __future__ import annotations

from jobs.lab.predict import memory, placement
from jobs.lab.predict.memory import F32

POLICIES = ("none", "full", "selective")


def core_activations(kind: str, n: int, heads: int) -> float:
    """What only the attention core keeps for backward: SDPA's log-sum-exp (fp32, one per
    token and head); the MLP block has no attention."""
    return n * heads * F32 if kind == "gpt" else 0.0


def kept_per_block(kind: str, policy: str, n: int, h: int, heads: int, e: int) -> float:
    """Bytes one block keeps from its forward to its backward, n tokens."""
    whole = memory.block_activations(kind, n, h, heads, e)
    if policy == "full":
        return n * h * e
    if policy == "selective":
        return whole - core_activations(kind, n, heads)
    return whole


def saved(kind: str, policy: str, layers: int, n: int, h: int, heads: int, e: int) -> float:
    """Activation bytes kept after forward: what recomputation saves against none."""
    return layers * (kept_per_block(kind, "none", n, h, heads, e)
                     - kept_per_block(kind, policy, n, h, heads, e))


def recompute_forwards(kind: str, policy: str, layers: int) -> dict[str, int]:
    """What backward runs again: every block's forward (full), or every attention core's
    (selective): the census of the step sees them inside backward."""
    if policy == "full":
        return {"block forwards": layers}
    if policy == "selective" and kind == "gpt":
        return {"attention core forwards": layers}
    return {}


def mlp_params(h: int) -> int:
    """The MLP's weights and biases (fc 4h^2+4h, proj 4h^2+h): their gradients appear
    first in a block's backward, beside its working set."""
    return 8 * h * h + 5 * h


def block_params(kind: str, h: int) -> int:
    return 12 * h * h + 13 * h if kind == "gpt" else mlp_params(h)


def step_peak(precision: str, kind: str, policy: str, *, P: int, layers: int, n: int, h: int,
              heads: int, v: int, e: int, inputs: bool, largest_update: int,
              rebuilt_output: bool) -> dict:
    """The step's peak on one data-parallel rank (one micro-batch of n tokens, the whole
    model): the state held throughout, plus the largest moment of backward - the loss's
    (every kept activation and the loss gradient); the first block backward runs (the
    last: every kept activation less the head's, the head's gradients) and the last it
    runs (block 0: its own activations, every gradient but the embedding's and block 0's
    own), each with its block rebuilt if fully recomputed (and, by hand, the rebuilt
    output), its working set and its MLP's gradients, which its backward makes first;
    the end (every gradient) and, with AdamW, the optimizer's step. Kept inputs fall and
    gradients grow as backward goes down the blocks: with full recomputation the last
    block is where the step peaks once the gradients outweigh the kept inputs. policy
    "none" is Strategy.peak_memory's formula for the same rank, plus those two moments
    (they never decide its peak)."""
    g = memory.RECIPES[precision]["grad"]
    state = memory.model_state(precision, P)
    held = {"params": state["params"], "optimizer": state["optimizer"]}
    grads = {"grads": state["grads"]}
    block = kept_per_block(kind, policy, n, h, heads, e)
    edge = memory.activations(kind, 0, n, h, heads, v, e, inputs=inputs)
    one = layers * block + edge
    head = memory.finish_activations(kind, n, h, v, e, inputs)
    rerun = {"working set": memory.backward_working_set(n, h, e),
             "block's MLP gradients": mlp_params(h) * g}
    if policy == "full":
        # all the block's activations but its input, which is the kept one
        rerun["rebuilt block"] = memory.block_activations(kind, n, h, heads, e) - n * h * e
        if rebuilt_output:
            rerun["rebuilt output"] = n * h * e
    finish = memory.finish_params(kind, h, v)
    embed = P - layers * block_params(kind, h) - finish
    moments = {"loss backward": {"activations": one,
                                 "loss gradient": memory.loss_gradient(kind, n, h, v, e)},
               "first block backward": {"activations": one - head, **rerun,
                                        "head gradients": finish * g},
               "last block backward": {"activations": edge - head + block, **rerun,
                                       "gradients above block 0": (P - embed
                                                                   - block_params(kind, h))
                                       * g},
               "backward end": grads}
    if precision == "bf16_adamw":
        moments["optimizer step"] = {**grads, "AdamW temporaries": 8 * largest_update}
    return {**memory.peak(held, moments), "model_state": state, "activations": one,
            "one_micro_batch_activations": one, "kept_per_block": block}


def placement_rule(ctx: placement.Ctx, strategy: str):
    """The sharding view (jobs/lab/predict/layout.py): recomputation moves no parameter - every
    rank a full copy, gradients all-reduced one tensor at a time, as dp_naive."""
    rule, summary, block_comm = placement.data_parallel(ctx, "dp_naive")
    how = ("only each block's input is kept; the block runs again in backward"
           if "full" in strategy else "the attention core runs again in backward")
    if ctx.d == 1:
        summary = ["One rank holds the whole model and trains on the whole batch; nothing "
                   "is communicated."]
    return rule, [*summary, f"Activation recomputation: {how}."], block_comm
