"""ZeRO-3 by hand (Rajbhandari et al. 2020, stage P_os+g+p), over data parallelism.

The parameters are sharded too. The model is cut into units in forward order - the
embedding, each block, the final norm and head (zero3.units) - and each unit's
parameters live in one flat buffer, padded to a multiple of d, of which rank r keeps
slice r for good (the shard: what the optimizer updates), with its gradient shard and
its optimizer-state shard: 16P/d bytes per rank in bf16_adamw, 12P/d in fp32_sgd, plus
whatever units are gathered at the moment.

Forward: a unit's flat buffer is allocated and all-gathered from the shards just before
the unit runs, and its storage freed (resized to 0) as soon as the unit's output exists.
The parameters are views of that buffer, so the tensors autograd saved from them (the
weights' transposes ...) stay valid while the storage under them comes and goes.
Backward: a hook on the unit's output - its gradient arrives before any of the unit's
backward runs - gathers the unit again; when the last of the unit's gradients has been
accumulated (every node that read its weights has run) the buffer is freed and the
gradients are copied into a staging buffer and reduce-scattered into the gradient shard
(ZeRO-2's hooks and staging, zero.py, one reduce-scatter in flight at a time).
Prefetching: while unit i computes, unit i+1's all-gather (in backward unit i-1's) is in
flight, so at most two units are whole at once.

Flat units, not FSDP2's per-parameter dim-0 chunks: one collective per unit with no
copy-in or copy-out (FSDP2 interleaves every parameter's chunks in its all-gather buffer
and copies them out), padding of at most d-1 elements per unit instead of per parameter;
the price is that a rank's shard cuts through tensors at arbitrary offsets (fine for an
element-wise optimizer, not for one that needs whole rows).

Bytes per step: every unit all-gathered twice and reduce-scattered once, S = padded P*e
each - 3*P*e, 1.5x DP's all-reduce (on the wire (d-1)/d of each). FSDP2 keeps its root
(embedding, final norm, head) gathered from forward to the end of backward: one
all-gather of the root fewer, and pads each parameter's rows rather than each unit.
"""

from __future__ import annotations

import torch

from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.components.optim import update_shard
from jobs.lab.predict import calibration, memory, zero3
from jobs.lab.strategies.base import Piece, StepOut, Strategy
from jobs.lab.strategies.zero import Zero1


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class Zero3(Zero1):
    name = "zero3"
    label = "ZeRO-3 by hand (parameters, gradients and optimizer state sharded)"
    stage = 3
    unmodelled = Strategy.unmodelled + ("the all-gathers' and reduce-scatters' buffers "
                                        "allocated and freed every unit",)

    def __init__(self, ctx, spec) -> None:  # Zero1's buckets are not built: units instead
        Strategy.__init__(self, ctx, spec)
        if spec.cfg.tie_head:
            raise ValueError("ZeRO-3 by hand: a tied head would be one tensor in two units")
        self.model = build_model(spec.cfg, ctx.device)
        named = list(self.model.named_parameters())
        self.names = {id(p): n for n, p in named}
        groups = zero3.units([n for n, _ in named])
        self.buckets = [self._unit(index, [named[i][1] for i in members])
                        for index, members in enumerate(groups)]
        self.steps = 0
        self.in_flight: list[dict] = []  # the unit whose reduce-scatter runs
        self.gathered_peak = {"bytes": 0, "units": 0}  # read off the storages

    def _unit(self, index: int, members: list[torch.nn.Parameter]) -> dict:
        d, r, dev = self.ctx.world, self.ctx.rank, self.ctx.device
        numel = sum(p.numel() for p in members)
        padded = -(-numel // d) * d
        flat = torch.zeros(padded, device=dev, dtype=members[0].dtype)
        offset, layout = 0, []
        for p in members:  # parameters become views into the flat unit
            n = p.numel()
            flat[offset:offset + n].copy_(p.detach().reshape(-1))
            p.data = flat[offset:offset + n].view_as(p)
            layout.append((p, offset, n))
            offset += n
            p.register_post_accumulate_grad_hook(self._make_hook(index))
        per = padded // d
        unit = {"flat": flat, "layout": layout, "lo": r * per, "hi": (r + 1) * per,
                "numel": numel, "padded": padded,
                "shard": flat[r * per:(r + 1) * per].clone(),  # this rank's, for good
                "grad": torch.zeros(per, device=dev, dtype=flat.dtype),
                "state": {}, "ready": 0, "work": None, "staging": None, "gather": None}
        self._free(unit)
        return unit

    # -- the whole unit: gathered when needed, freed after
    def _free(self, unit: dict) -> None:
        unit["flat"].untyped_storage().resize_(0)

    def _gather(self, index: int) -> None:
        """Allocate unit `index` and launch its all-gather (prefetch: not waited here)."""
        unit = self.buckets[index]
        unit["flat"].untyped_storage().resize_(unit["padded"] * unit["flat"].element_size())
        unit["gather"] = self.ctx.comm.all_gather(unit["flat"], unit["shard"], async_op=True,
                                                  unit=index)
        whole = [u["flat"].untyped_storage().nbytes() for u in self.buckets]
        if sum(whole) > self.gathered_peak["bytes"]:
            self.gathered_peak = {"bytes": sum(whole), "units": sum(1 for b in whole if b)}

    def _ready(self, index: int, step: int) -> None:
        """Unit `index` whole (gathered now unless prefetched), and the next one in the
        direction `step` (+1 forward, -1 backward) on its way."""
        unit = self.buckets[index]
        if unit["gather"] is None:
            self._gather(index)
        unit["gather"].wait()
        unit["gather"] = None
        if 0 <= index + step < len(self.buckets):
            self._gather(index + step)

    def _forward(self, index: int, fn, x: torch.Tensor) -> torch.Tensor:
        self._ready(index, +1)
        out = fn(x)
        self._free(self.buckets[index])
        out.register_hook(self._before_backward(index))
        return out

    def _before_backward(self, index: int):
        def hook(_grad: torch.Tensor) -> None:
            self._ready(index, -1)
        return hook

    def _make_hook(self, index: int):
        """ZeRO-2's hook (stage the unit's gradients, reduce-scatter them), the unit's
        whole parameters freed first: every node that read them has run."""
        scatter = super()._make_hook(index)

        def hook(p: torch.Tensor) -> None:
            unit = self.buckets[index]
            if unit["ready"] + 1 == len(unit["layout"]):
                self._free(unit)
            scatter(p)
        return hook

    def _model_forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """The model's forward, unit by unit (no block output outlives its use here:
        backward frees what autograd saved)."""
        model = self.model
        x = self._forward(0, model.embed, inputs)
        for index, blk in enumerate(model.blocks.values(), start=1):
            x = self._forward(index, blk, x)
        return self._forward(len(self.buckets) - 1, model.finish, x)

    def train_step(self, batch: Batch) -> StepOut:
        ctx, tl = self.ctx, self.ctx.timeline
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)
        self.steps += 1
        with tl.span("forward", mb=0):
            loss = loss_fn(self.spec.cfg.kind)(self._model_forward(local.inputs),
                                               local.targets)
        with tl.span("backward", mb=0):
            loss.backward()
        for index, unit in enumerate(self.buckets):
            if unit["work"] is None:
                raise RuntimeError(
                    f"ZeRO-3 unit {index}: its reduce-scatter hook did not fire this step "
                    f"({unit['ready']} of {len(unit['layout'])} gradients arrived); its "
                    "gradient shard is the previous step's")
            unit["work"].wait()
            unit["grad"].div_(ctx.world)
            unit["ready"], unit["work"], unit["staging"] = 0, None, None
        self.in_flight = []
        with tl.span("optimizer"):
            for unit in self.buckets:
                update_shard(self.precision, unit["state"], unit["shard"], unit["grad"],
                             self.steps)
        return StepOut(loss.detach(), 1.0 / ctx.world)

    # -- gate: every rank owns a slice of each unit's parameters, gradients and state
    def param_pieces(self) -> list[Piece]:
        return self._slices(lambda unit: [("", unit["shard"])])

    def replicated(self):
        return []  # nothing is whole between steps

    # -- measurement and prediction
    def parameters(self) -> list[torch.Tensor]:
        return [u["shard"] for u in self.buckets]

    def model_state(self) -> dict[str, int]:
        state = {"params": _nbytes(u["shard"] for u in self.buckets),
                 "grads": _nbytes(u["grad"] for u in self.buckets),
                 "optimizer": _nbytes(t for u in self.buckets for t in u["state"].values())}
        return {**state, "total": sum(state.values())}

    def largest_update(self) -> int:
        return max(u["padded"] for u in self.buckets) // self.ctx.world  # a shard

    def predicted_comm(self):
        return zero3.comm([u["numel"] for u in self.buckets], self.spec.e,
                                    self.ctx.world)

    def overlap_s(self, cal: calibration.Calibration, compute: list[dict]) -> float:
        """On a GPU the prefetched all-gathers and the reduce-scatter in flight run beside
        the units' compute: all but the first gather and the last reduce-scatter (the
        embedding's, both) can hide. On CPU gloo's threads compete with the compute for
        the same cores: nothing is assumed hidden (as for DP)."""
        if not self.ctx.is_cuda or self.ctx.world == 1:
            return 0.0
        first = self.buckets[0]["padded"] * self.spec.e
        exposed = cal.coll("all_gather", first) + cal.coll("reduce_scatter", first)
        busy = max(sum(sum(ph.values()) for ph in c.values()) for c in compute)
        return max(0.0, min(busy, cal.comm(self.predicted_comm()) - exposed))

    def predicted_memory(self) -> dict:
        """Sharded state (e + e + K bytes per padded element, over d) held throughout,
        and the largest of backward's moments, each with the units whole then: the head's
        (the finish unit gathered again and the last block prefetched), the last block's
        (it and the block before whole, the finish unit's gradients staged for their
        reduce-scatter) and a block's before it (the same, a block's gradients staged
        and one block's activations fewer) - at the MLP's widest, with its output
        projection's gradients just made. The staging lives until the next unit's
        reduce-scatter starts (zero.py's _retire); gloo's copy of it (its reduce-scatter
        all-reduces a copy) is gone by the MLP's widest - the collective ran while the
        unit was gathered, as measured - and only counted at backward's end."""
        c, e, d = self.spec.cfg, self.spec.e, self.ctx.world
        n, h, L, cuda = self.local_tokens(), c.hidden, c.layers, self.ctx.is_cuda
        sizes = [u["padded"] for u in self.buckets]
        E, B, F = sizes[0], max(sizes[1:-1]), sizes[-1]
        state = memory.model_state(self.precision, sum(sizes), stage=3, d=d)
        held = {k: state[k] for k in ("params", "grads", "optimizer")}
        one = memory.activations(c.kind, L, n, h, c.heads, c.vocab, e, inputs=cuda)
        head = memory.finish_activations(c.kind, n, h, c.vocab, e, cuda)
        blk = memory.block_activations(c.kind, n, h, c.heads, e)
        work = memory.backward_working_set(n, h, e)
        out_grad = n * (c.vocab if c.kind == "gpt" else h) * e
        copy = 0 if "nccl" in self.ctx.backend else 1  # gloo's reduced copy (zero.py)
        proj = (4 * h * h + h) * e
        before = B if L > 1 else E  # the unit prefetched during the last block's backward
        moments = {
            "loss backward": {"activations": one, "loss gradient":
                              memory.loss_gradient(c.kind, n, h, c.vocab, e)},
            "head backward": {"activations": one, "output gradient": out_grad,
                              "finish unit whole": F * e, "last block whole": B * e,
                              "head gradients": F * e, "head input gradient": n * h * e},
            "last block backward": {"activations": one - head, "working set": work,
                                    "2 units whole": (B + before) * e,
                                    "finish gradients staged": F * e,
                                    "MLP projection gradients": proj},
            "backward end": {"embedding gradients staged": (1 + copy) * E * e}}
        if L > 1:  # the block before the last: the one before it (or the embedding) whole
            moments["block backward"] = {"activations": one - head - blk, "working set": work,
                                         "2 units whole": (B + (B if L > 2 else E)) * e,
                                         "block gradients staged": B * e,
                                         "MLP projection gradients": proj}
        if self.precision == "bf16_adamw":
            moments["optimizer step"] = {"AdamW temporaries": 8 * self.largest_update()}
        return {**memory.peak(held, moments), "model_state": state,
                "activations": one, "one_micro_batch_activations": one}

    def extra(self) -> dict:
        return {"units": len(self.buckets), "prefetch": True,
                "gathered_peak_bytes": self.gathered_peak["bytes"],
                "gathered_peak_units": self.gathered_peak["units"],
                "largest_unit_bytes": max(u["padded"] for u in self.buckets) * self.spec.e}
