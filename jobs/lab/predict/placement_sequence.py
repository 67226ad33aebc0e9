"""The sharding view (jobs/lab/predict/layout.py's rules) of sequence and context parallelism:
plain arithmetic, no torch, the same helpers the strategies use.

Sequence parallelism places the parameters exactly as tensor parallelism does (its
column and row splits); what changes is the communication around them and that the
LayerNorms and row biases, replicated, now get partial gradients. Ring attention keeps
every parameter whole on every rank, as data parallelism does."""

from __future__ import annotations

from jobs.lab.predict import cost
from jobs.lab.predict.placement import Ctx, nbytes, tensor_parallel


def sequence_parallel(ctx: Ctx, strategy: str):
    m, t = ctx.m, ctx.d
    tp_rule, _, _ = tensor_parallel(ctx, "tp_megatron")
    act = nbytes(ctx.batch_size * m.seq_len * m.hidden * m.e)
    torch_own = strategy == "torch_tp_sequence"

    def rule(i, key, layer, name, shape):
        split, pieces, held, _ = tp_rule(i, key, layer, name, shape)
        module = name.split(".", 2)[-1].rsplit(".", 1)[0] if key == "block" else ""
        if split == "column":
            comm = ("Column-parallel on the whole sequence: its input is all-gathered from "
                    f"the ranks' s/{t} shards ({act}) in forward, "
                    + ("and the input's gradient all-reduced in backward, once for each of "
                       "q, k, v and fc." if torch_own else
                       "one gather per region (q, k and v share one), its gradient "
                       "reduce-scattered in backward."))
        elif split == "row":
            comm = (f"Row-parallel: its partial sums are reduce-scattered ({act}) along the "
                    "sequence in forward; the gradient all-gathered in backward.")
        elif key == "block" and (module.startswith("ln") or module in ("attn.proj",
                                                                       "mlp.proj")):
            comm = (f"Replicated, but applied to this rank's s/{t} tokens only: its gradient "
                    "is a partial sum, " + ("reduced by DTensor when the optimizer reads it."
                                            if torch_own else
                                            "all-reduced with the others of its kind after "
                                            "backward (one flat all-reduce)."))
        else:
            comm = ("Replicated: every rank computes it on the whole sequence and gets the "
                    "same gradient, so nothing is communicated.")
        return split, pieces, held, (comm,)

    split, rep = cost.tp_split_params(m.layers, m.hidden, m.seq_len, m.vocab)
    if torch_own:
        per = (f"2 all-gathers and 2 reduce-scatters of its activation ({act}) in forward; "
               "in backward 2 all-gathers and 4 all-reduces (q, k, v, fc)")
    else:
        per = (f"2 all-gathers and 2 reduce-scatters of its activation ({act}) in forward, "
               "the same in backward: tensor parallelism's bytes")
    block_comm = {("block", i): [f"{per}; LayerNorms and residuals on s/{t} tokens."]
                  for i in range(m.layers)}
    return rule, [
        f"Tensor parallelism's split ({split:,} parameters split {t} ways, {rep:,} "
        "replicated), with the LayerNorms, residual adds and row biases run on s/"
        f"{t} of the sequence: their activations divided by {t}.",
        "All-gather before each column-parallel region, reduce-scatter after each "
        "row-parallel one (Megatron's ḡ); one more all-gather at each end of the stack."], \
        block_comm


def context_parallel(ctx: Ctx, _strategy: str):
    m, c = ctx.m, ctx.d
    if m.kind != "gpt":
        raise ValueError("ring attention needs the GPT's attention")
    block = nbytes(2 * ctx.batch_size * (m.seq_len // c) * m.hidden * m.e)

    def rule(i, _key, _layer, _name, shape):
        pieces, held = ctx.everyone(shape)
        return "replicated", pieces, held, (
            f"Whole on every rank; its gradient (S = {nbytes(ctx.numels[i] * m.e)}) "
            f"all-reduced after backward over the {c} ranks' token shards."
            if c > 1 else "One rank: nothing to send.",)

    block_comm = {("block", i): [f"Attention: {c - 1} ring step(s), each sending this rank's "
                                 f"current K,V block ({block}) to the next rank, in forward; "
                                 "their gradients travel back in backward."]
                  for i in range(m.layers)} if c > 1 else {}
    return rule, [
        f"Every rank holds the whole model and s/{c} tokens of every sequence (chunks r and "
        f"{2 * c - 1}-r of {2 * c}, so that causal attention costs each rank the same).",
        "Only attention mixes tokens: K,V blocks go around a ring, partial softmaxes "
        "combined by their log-sum-exp; the gradients are all-reduced as in data "
        "parallelism."], block_comm
