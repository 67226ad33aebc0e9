"""How each strategy places one parameter tensor on the ranks: jobs/lab/predict/layout.py's rules.

Plain arithmetic, no torch. A strategy's rule takes a tensor (its index in
model.named_parameters() order, its block, its shape) and says the piece each rank owns,
the elements each rank keeps in memory and what is communicated for it; the rule also
says what the whole strategy does in a sentence or two, and what a block's activations
cost (pipeline stage boundaries, tensor parallelism's f and g). Each rule uses the
strategy's own helpers from cost.py (plan_buckets, fsdp_padded, stage_layers,
tp_split_params), so the picture cannot drift from what runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from jobs.lab.predict import cost

FLAT = -1  # Piece.dim of a flat range of the flattened tensor (ZeRO's buckets)
COLUMN = ("attn.q", "attn.k", "attn.v", "mlp.fc")  # TP: split by output rows
ROW = ("attn.proj", "mlp.proj")  # TP: split by input columns, bias replicated


@dataclass(frozen=True)
class Model:
    kind: str = "gpt"
    layers: int = 4
    hidden: int = 64
    heads: int = 4
    seq_len: int = 32
    vocab: int = 256
    tie_head: bool = False
    dtype: str = "float32"

    @classmethod
    def of(cls, described: dict) -> Model:
        """From a result's ``model`` or a run's parameters ("model" names the kind there);
        ValueError when it does not describe one of the lab's models."""
        kind = described.get("kind", described.get("model", "gpt"))
        if kind not in ("gpt", "mlp"):
            raise ValueError(f"unknown model kind {kind!r}")
        dims = {k: described.get(k, getattr(cls, k))
                for k in ("layers", "hidden", "heads", "seq_len", "vocab")}
        for key, value in dims.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**20:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        if dims["hidden"] % dims["heads"]:
            raise ValueError("hidden must be divisible by heads")
        dtype = described.get("dtype", "float32")
        return cls(kind=kind, **dims, tie_head=described.get("tie_head") is True,
                   dtype=dtype if dtype in ("float32", "bfloat16") else "float32")

    @property
    def e(self) -> int:
        return 2 if self.dtype == "bfloat16" else 4

    def param_count(self) -> int:
        return cost.param_count(self.kind, self.layers, self.hidden, self.seq_len,
                                     self.vocab, tied=self.tie_head)

    def tensors(self) -> list[tuple[str, int | None, str, tuple[int, ...]]]:
        """(block key, layer, parameter name, shape) in model.named_parameters() order."""
        h, v, s = self.hidden, self.vocab, self.seq_len

        def linear(name: str, out: int, inp: int) -> list:
            return [(f"{name}.weight", (out, inp)), (f"{name}.bias", (out,))]

        def norm(name: str) -> list:
            return [(f"{name}.weight", (h,)), (f"{name}.bias", (h,))]

        if self.kind == "gpt":
            embed = [("wte.weight", (v, h)), ("wpe.weight", (s, h))]
            block = norm("ln1") + [t for n in ("q", "k", "v", "proj")
                                   for t in linear(f"attn.{n}", h, h)]
            block += norm("ln2") + linear("mlp.fc", 4 * h, h) + linear("mlp.proj", h, 4 * h)
            finish = norm("ln_f") + ([] if self.tie_head else [("head.weight", (v, h))])
        else:
            embed, finish = linear("inp", h, h), linear("out", h, h)
            block = linear("mlp.fc", 4 * h, h) + linear("mlp.proj", h, 4 * h)
        out = [("embed", None, n, shape) for n, shape in embed]
        for i in range(self.layers):
            out += [("block", i, f"blocks.{i}.{n}", shape) for n, shape in block]
        return out + [("finish", None, n, shape) for n, shape in finish]


@dataclass(frozen=True)
class Piece:
    """What one rank owns of a tensor: the whole (dim None), a slice [start, stop) along
    dim 0 or 1, or a flat range of the flattened tensor (dim FLAT)."""

    rank: int
    shape: tuple[int, ...]
    dim: int | None = None
    start: int = 0
    stop: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def describe(self) -> str:
        if self.dim is None:
            return "all of it"
        if self.dim == FLAT:
            return f"elements {self.start:,}–{self.stop - 1:,} of the flattened tensor"
        what = "columns" if self.dim == 1 else "rows" if len(self.shape) > 1 else "elements"
        return f"{what} {self.start:,}–{self.stop - 1:,}"


def nbytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n):,} B"


@dataclass
class Ctx:
    """What a rule may read: the model, d ranks, and the parameters that shape it."""

    m: Model
    d: int
    micro_batches: int = 1
    bucket_cap_mb: float = 0.25
    batch_size: int = 8
    virtual_stages: int = 1  # chunks a rank holds (the interleaved schedules)
    numels: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.numels = [math.prod(shape) for _, _, _, shape in self.m.tensors()]

    @property
    def cap_elems(self) -> int:
        """The bucket cap in elements, as TrainSpec.cap_elems."""
        return max(1, int(self.bucket_cap_mb * 2**20) // self.m.e)

    def everyone(self, shape: tuple) -> tuple[list[Piece], list[int]]:
        return [Piece(r, shape) for r in range(self.d)], [math.prod(shape)] * self.d


# A rule: (index, block key, layer, name, shape) -> (split, pieces, held, comm)
# and rules(ctx, strategy) -> (rule, summary sentences, {(key, layer): block sentences})


def single(ctx: Ctx, _strategy: str):
    def rule(_i, _key, _layer, _name, shape):
        return "whole", [Piece(0, shape)], [math.prod(shape)] + [0] * (ctx.d - 1), ()
    others = " The other ranks wait: it is the baseline." if ctx.d > 1 else ""
    return rule, [f"Rank 0 holds the whole model and trains on the whole batch.{others} "
                  "Nothing is communicated."], {}


def data_parallel(ctx: Ctx, strategy: str):
    d, e = ctx.d, ctx.m.e
    buckets = cost.plan_buckets(ctx.numels, ctx.cap_elems)
    where = {i: k for k, b in enumerate(buckets) for i in b["params"]}
    last = "the last micro-batch's backward" if ctx.micro_batches > 1 else "backward"

    def rule(i, _key, _layer, _name, shape):
        pieces, held = ctx.everyone(shape)
        if d == 1:
            return "replicated", pieces, held, ("One rank: its all-reduce moves nothing.",)
        if strategy == "dp_naive":
            return "replicated", pieces, held, (
                f"Gradient all-reduced on its own (S = {nbytes(ctx.numels[i] * e)}) after "
                f"{last}, then divided by {d}.",)
        k = where[i]
        who = " by DDP's reducer" if strategy == "ddp" else ""
        return "replicated", pieces, held, (
            f"Gradient all-reduced{who} in bucket {k} of {len(buckets)} (S = "
            f"{nbytes(buckets[k]['numel'] * e)}) as soon as the bucket's last gradient lands "
            f"in {last}, overlapping the rest of backward.",)

    P = sum(ctx.numels)
    how = ("one all-reduce per tensor" if strategy == "dp_naive"
           else f"{len(buckets)} bucketed all-reduces")
    summary = [f"Every rank holds a full copy ({P:,} parameters, {nbytes(P * e)}) and trains "
               f"on 1/{d} of the batch; gradients are averaged with {how}: S = "
               f"{nbytes(P * e)} per step."]
    if ctx.micro_batches > 1:
        summary.append(f"The first {ctx.micro_batches - 1} micro-batches skip the sync "
                       "(no_sync): their gradients accumulate locally.")
    return rule, summary, {}


def zero(ctx: Ctx, strategy: str):
    d, e = ctx.d, ctx.m.e
    buckets = cost.plan_buckets(ctx.numels, ctx.cap_elems, pad_to=d)
    offset: dict[int, tuple[int, int]] = {}  # tensor -> (bucket, offset in its flat buffer)
    for k, b in enumerate(buckets):
        at = 0
        for i in b["params"]:
            offset[i] = (k, at)
            at += ctx.numels[i]
    when = ("from a hook as soon as the bucket's last gradient lands, during backward"
            if strategy == "zero2" else "after backward")

    def rule(i, _key, _layer, _name, shape):
        k, off = offset[i]
        n, per = ctx.numels[i], buckets[k]["padded"] // d
        pieces = [Piece(r, (b - a,), FLAT, a - off, b - off) for r in range(d)
                  if (a := max(off, r * per)) < (b := min(off + n, (r + 1) * per))]
        S = nbytes(buckets[k]["padded"] * e)
        return "flat", pieces, [n] * d, (
            f"Gradient reduce-scattered in bucket {k} of {len(buckets)} (S = {S}) {when}; "
            "the full gradient is dropped, each owner keeps the averaged gradient of its "
            "range and updates that range with its optimizer state.",
            f"Parameter all-gathered in bucket {k} (S = {S}) after the optimizer step, so "
            "every rank holds it whole again.")

    P = sum(ctx.numels)
    pad = sum(b["padded"] for b in buckets) - P
    what = "optimizer state" + (" and gradients" if strategy == "zero2" else "")
    verb = "are" if strategy == "zero2" else "is"
    padded = f" (padded by {pad:,} elements to a multiple of {d})" if pad else ""
    return rule, [
        f"Every rank holds the full parameters ({nbytes(P * e)}); the {what} {verb} split: "
        f"rank r owns slice r of each of {len(buckets)} flat buckets{padded}. The colours "
        "show who owns each range.",
        f"Per step: reduce-scatter S = {nbytes((P + pad) * e)} and all-gather the same, "
        "DP's all-reduce bytes."], {}


def fsdp2(ctx: Ctx, _strategy: str):
    d, m = ctx.d, ctx.m
    e_gather = 2 if m.dtype == "bfloat16" else 4  # MixedPrecisionPolicy(param_dtype=bf16)
    units: dict[int | None, list[tuple]] = {}
    for key, layer, _, shape in m.tensors():
        units.setdefault(layer if key == "block" else None, []).append(shape)
    size = {u: cost.fsdp_padded(shapes, d) for u, shapes in units.items()}

    def rule(_i, _key, layer, _name, shape):
        rows, rest, c = shape[0], shape[1:], math.ceil(shape[0] / d)
        spans = [(min(r * c, rows), min((r + 1) * c, rows)) for r in range(d)]
        pieces = [Piece(r, (b - a, *rest), 0, a, b) for r, (a, b) in enumerate(spans) if a < b]
        held = [(b - a) * math.prod(rest) for a, b in spans]
        if d == 1:
            return "dim0", pieces, held, ("One rank: FSDP2 gathers and scatters nothing.",)
        gather, scatter = nbytes(size[layer] * e_gather), nbytes(size[layer] * 4)
        padded = f" Its chunks are padded to {c:,} rows." if rows % d else ""
        if layer is None:
            return "dim0", pieces, held, (
                f"All-gathered with the root unit (S = {gather}) before forward, and kept "
                "whole until backward ends.",
                f"Gradient reduce-scattered with the root (S = {scatter}) at the end of "
                f"backward.{padded}")
        return "dim0", pieces, held, (
            f"All-gathered with the rest of its block (S = {gather}) before the block's "
            "forward, freed after; all-gathered again before its backward.",
            f"Gradient reduce-scattered with the rest of its block (S = {scatter}) after "
            f"the block's backward.{padded}")

    P = sum(ctx.numels)
    return rule, [
        f"Every tensor is cut into {d} chunks along dim 0 (ZeRO-3): each rank keeps about "
        f"1/{d} of the parameters, gradients and optimizer state ({nbytes(P * 4 / d)} of "
        "fp32 weights).",
        "One unit per block, and the root (the rest). Per step about 3 × P bytes: two "
        "all-gathers of each block, one of the root, and one reduce-scatter of each."], {}


def pipeline(ctx: Ctx, strategy: str):
    m, p = ctx.m, ctx.d
    if m.layers < p:
        raise ValueError(f"{m.layers} layers cannot fill {p} stages")
    mb = 1 if strategy == "naive_mp" else ctx.micro_batches
    spans = [cost.stage_layers(m.layers, p, r) for r in range(p)]
    stage = {i: r for r, span in enumerate(spans) for i in span}
    owner = {"embed": 0, "finish": p - 1}
    msg = nbytes(ctx.batch_size // mb * m.seq_len * m.hidden * m.e)
    each = "each micro-batch" if mb > 1 else "the batch"
    block_comm: dict[tuple, list[str]] = {}
    for r, span in enumerate(spans):
        if r < p - 1:
            block_comm.setdefault(("block", span[-1]), []).append(
                f"Activation ({msg}) sent to rank {r + 1} after the forward of {each}; its "
                f"gradient comes back from rank {r + 1} in backward.")
        if r > 0:
            block_comm.setdefault(("block", span[0]), []).append(
                f"Activation received from rank {r - 1} before the forward of {each}; its "
                f"gradient sent back to rank {r - 1} after backward.")

    def rule(_i, key, layer, _name, shape):
        r = stage[layer] if key == "block" else owner[key]
        held = [math.prod(shape) if q == r else 0 for q in range(p)]
        return "stage", [Piece(r, shape)], held, (
            f"None: stage {r} owns it, and its gradient stays on rank {r}.",)

    schedule = {"naive_mp": "one batch, no micro-batches, so (p-1)/p of the step is idle",
                "gpipe": f"all {mb} forwards, then all {mb} backwards",
                "1f1b": "one forward, one backward in the steady state",
                "torch_gpipe": f"PyTorch's ScheduleGPipe over {mb} micro-batches",
                "torch_1f1b": f"PyTorch's Schedule1F1B over {mb} micro-batches"}[strategy]
    stages = "; ".join(f"rank {r}: blocks {s[0]}–{s[-1]}" if len(s) > 1
                       else f"rank {r}: block {s[0]}" for r, s in enumerate(spans))
    return rule, [
        f"The blocks are cut into {p} stages ({stages}); rank 0 also holds the embedding, "
        f"rank {p - 1} the head and the loss. Schedule: {schedule}.",
        f"Only activations move: {msg} per {'micro-batch' if mb > 1 else 'batch'} across "
        "each stage boundary, each way."], block_comm


def tensor_parallel(ctx: Ctx, strategy: str):
    m, t = ctx.m, ctx.d
    if m.kind != "gpt":
        raise ValueError("tensor parallelism splits the GPT's blocks only")
    if m.heads % t:
        raise ValueError(f"{m.heads} heads cannot be split over {t} ranks")
    act = nbytes(ctx.batch_size * m.seq_len * m.hidden * m.e)
    dtensor = strategy == "tp_dtensor"
    if dtensor:
        column = (f"ColwiseParallel: its input is made replicated, and the input's gradient "
                  f"is all-reduced ({act}) in backward, once for each of q, k, v and fc.")
    else:
        column = (f"Column-parallel: its input passes f (identity forward, all-reduce of "
                  f"its gradient, {act}, in backward), one f shared by q, k and v.")

    def rule(_i, key, _layer, name, shape):
        module = name.split(".", 2)[-1].rsplit(".", 1)[0] if key == "block" else ""
        if module in COLUMN:
            n = shape[0] // t
            pieces = [Piece(r, (n, *shape[1:]), 0, r * n, (r + 1) * n) for r in range(t)]
            what = "heads" if module.startswith("attn") else "hidden units"
            return "column", pieces, [p.numel for p in pieces], (
                f"Rank r computes {n:,} output features ({what} split {t} ways). {column}",)
        if module in ROW and name.endswith(".weight"):
            n = shape[1] // t
            pieces = [Piece(r, (shape[0], n), 1, r * n, (r + 1) * n) for r in range(t)]
            return "row", pieces, [p.numel for p in pieces], (
                f"Row-parallel: each rank multiplies its {n:,} input features into a partial "
                f"sum; g all-reduces the output ({act}) in forward, identity in backward.",)
        pieces, held = ctx.everyone(shape)
        return "replicated", pieces, held, (
            "Replicated, added once after the all-reduce of the partial sums."
            if module in ROW else "Replicated: every rank computes it on the whole batch "
            "and gets the same gradient, so nothing is communicated.",)

    split, rep = cost.tp_split_params(m.layers, m.hidden, m.seq_len, m.vocab)
    per = 6 if dtensor else 4
    how = "2 in forward (g), 4 in backward (q, k, v, fc)" if dtensor else \
        "2 in forward (g), 2 in backward (f)"
    block_comm = {("block", i): [f"{per} all-reduces of its activation ({act}) per step: "
                                 f"{how}, on the critical path."] for i in range(m.layers)}
    return rule, [
        f"Each block's q, k, v and MLP fc are split by output rows, its two projections by "
        f"input columns: {split:,} parameters split {t} ways, {rep:,} replicated "
        "(embeddings, LayerNorms, projection biases, head).",
        f"Every rank runs the whole batch: {per} all-reduces of b·s·h ({act}) per block per "
        "step."], block_comm
