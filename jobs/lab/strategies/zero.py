"""ZeRO stages 1 and 2 by hand (Rajbhandari et al. 2020), over data parallelism.

Parameters live in flat, padded buckets (the DP bucket plan, each bucket a
multiple of d long) and rank r owns slice r of every bucket. After backward the
gradients are reduce-scattered, so each rank holds only the averaged gradient of
its slice; it updates that slice with its slice of the optimizer state (SGD
momentum, or the fp32 master and AdamW moments) and the slices are all-gathered
back into every replica.
ZeRO-1 keeps full gradients, as the paper does (its (2 + 2 + K/d) P): each parameter's
gradient is a view into a flat gradient bucket, reduce-scattered in place at the end of
backward - the rank's slice of the bucket receives the sum - so it holds no second
copy of its slice and stages nothing;
ZeRO-2 reduce-scatters each bucket from a hook as soon as its gradients exist and
drops the full gradients, so gradients too cost 1/d per rank - and so does the
staging they are copied into: at most one reduce-scatter is in flight (the next
bucket's hook waits for it, then frees its staging), as DeepSpeed keeps a fixed pair
of reduction buckets.
Bytes per step: reduce_scatter P*e + all_gather P*e - the same as DP's all_reduce.
A ZeRO-2 bucket whose hook did not fire is an error: its gradient slice would still
hold the previous step's, and the step would silently apply it again.
"""

from __future__ import annotations

import torch

from jobs.lab.components.model import Batch, build_model, loss_fn
from jobs.lab.components.optim import STATE_KEYS, update_shard
from jobs.lab.predict import cost
from jobs.lab.strategies.base import Piece, StepOut, Strategy, model_state


class Zero1(Strategy):
    name = "zero1"
    label = "ZeRO-1 by hand (optimizer state sharded)"
    stage = 1

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        d, r, dev = ctx.world, ctx.rank, ctx.device
        self.model = build_model(spec.cfg, dev)
        params = list(self.model.parameters())
        self.names = {id(p): n for n, p in self.model.named_parameters()}
        self.plan = cost.plan_buckets([p.numel() for p in params], spec.cap_elems, d)
        self.buckets = []
        for index, b in enumerate(self.plan):
            members = [params[i] for i in b["params"]]
            flat = torch.zeros(b["padded"], device=dev, dtype=params[0].dtype)
            offset, layout = 0, []
            for p in members:  # parameters become views into the flat bucket
                n = p.numel()
                flat[offset:offset + n].copy_(p.detach().reshape(-1))
                p.data = flat[offset:offset + n].view_as(p)
                layout.append((p, offset, n))
                offset += n
            per = b["padded"] // d
            bucket = {"flat": flat, "layout": layout, "lo": r * per, "hi": (r + 1) * per,
                      "grad": torch.zeros(per, device=dev, dtype=flat.dtype),
                      "state": {}, "ready": 0, "work": None, "staging": None}
            if self.stage == 1:  # gradients accumulate in place into the flat bucket
                bucket["grads"] = torch.zeros_like(flat)
                bucket["grad"] = bucket["grads"][r * per:(r + 1) * per]  # this rank's slice
                for p, off, n in layout:
                    p.grad = bucket["grads"][off:off + n].view_as(p)
            self.buckets.append(bucket)
            if self.stage == 2:
                for p in members:
                    p.register_post_accumulate_grad_hook(self._make_hook(index))
        self.steps = 0
        self.in_flight: list[dict] = []  # ZeRO-2: the bucket whose reduce-scatter runs

    # -- stage 2: reduce-scatter a bucket the moment its last gradient lands
    def _make_hook(self, index: int):
        def hook(_p: torch.Tensor) -> None:
            bucket = self.buckets[index]
            bucket["ready"] += 1
            if bucket["ready"] == len(bucket["layout"]):
                self._retire()
                self._reduce_scatter(bucket, index, async_op=True)
                self.in_flight.append(bucket)
                for p, _, _ in bucket["layout"]:
                    p.grad = None  # the full gradient is no longer needed here
        return hook

    def _retire(self) -> None:
        """Wait for the reduce-scatters in flight and free their staging."""
        for bucket in self.in_flight:
            bucket["work"].wait()
            bucket["staging"] = None
        self.in_flight = []

    def _reduce_scatter(self, bucket: dict, index: int, async_op: bool) -> None:
        if self.stage == 1:  # in place: the input is the bucket, the output its own slice
            bucket["work"] = self.ctx.comm.reduce_scatter(bucket["grad"], bucket["grads"],
                                                          async_op=async_op, bucket=index)
            return
        staging = torch.zeros_like(bucket["flat"])
        for p, off, n in bucket["layout"]:
            staging[off:off + n].copy_(p.grad.reshape(-1))
        bucket["staging"] = staging  # kept alive until the collective completes
        bucket["work"] = self.ctx.comm.reduce_scatter(bucket["grad"], staging,
                                                      async_op=async_op, bucket=index)

    def train_step(self, batch: Batch) -> StepOut:
        ctx, tl = self.ctx, self.ctx.timeline
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)
        for bucket in self.buckets:
            if self.stage == 1:  # backward adds into the views in place
                bucket["grads"].zero_()
            else:
                for p, _, _ in bucket["layout"]:
                    p.grad = None
        self.steps += 1
        with tl.span("forward", mb=0):
            loss = loss_fn(self.spec.cfg.kind)(self.model(local.inputs), local.targets)
        with tl.span("backward", mb=0):
            loss.backward()
        for index, bucket in enumerate(self.buckets):
            if self.stage == 1:
                self._reduce_scatter(bucket, index, async_op=False)
            elif bucket["work"] is None:
                raise RuntimeError(
                    f"ZeRO-2 bucket {index}: its reduce-scatter hook did not fire this step "
                    f"({bucket['ready']} of {len(bucket['layout'])} gradients arrived); its "
                    "gradient slice is the previous step's")
            else:
                bucket["work"].wait()
            bucket["grad"].div_(ctx.world)
            bucket["ready"], bucket["work"], bucket["staging"] = 0, None, None
        self.in_flight = []
        with tl.span("optimizer"):
            for index, bucket in enumerate(self.buckets):
                shard = bucket["flat"][bucket["lo"]:bucket["hi"]]
                update_shard(self.precision, bucket["state"], shard, bucket["grad"], self.steps)
                ctx.comm.all_gather(bucket["flat"], shard.clone(), bucket=index)
        return StepOut(loss.detach(), 1.0 / ctx.world)

    # -- gate: each rank owns slices of gradients and optimizer state; parameters are whole
    def _slices(self, of) -> list[Piece]:
        """of(bucket) -> [(name suffix, this rank's flat slice or None)]."""
        pieces = []
        for bucket in self.buckets:
            lo, hi = bucket["lo"], bucket["hi"]
            for p, off, n in bucket["layout"]:
                a, b = max(off, lo), min(off + n, hi)
                if a < b:
                    for suffix, flat in of(bucket):
                        mine = flat[a - lo:b - lo] if flat is not None else None
                        pieces.append(Piece(self.names[id(p)] + suffix, mine,
                                            lambda full, s=a - off, e=b - off:
                                            full.reshape(-1)[s:e]))
        return pieces

    def grad_pieces(self) -> list[Piece]:
        return self._slices(lambda bucket: [("", bucket["grad"])])

    def state_pieces(self) -> list[Piece]:
        keys = STATE_KEYS[self.precision]
        return self._slices(lambda bucket: [("" if len(keys) == 1 else f".{k}",
                                             bucket["state"].get(k)) for k in keys])

    def replicated(self):
        return [(None, list(self.model.named_parameters()))]

    def model_state(self) -> dict[str, int]:
        state = model_state(self.parameters(), None)
        # ZeRO-1: its gradient buckets (its slices among them; every gradient a view into
        # one); ZeRO-2: the slices alone
        state["grads"] = sum(g.numel() * g.element_size() for g in
                             (b["grads"] if self.stage == 1 else b["grad"] for b in self.buckets))
        state["optimizer"] = sum(t.numel() * t.element_size() for b in self.buckets
                                 for t in b["state"].values())
        state["total"] = state["params"] + state["grads"] + state["optimizer"]
        return state

    def largest_update(self) -> int:
        return max(b["padded"] for b in self.plan) // self.ctx.world  # a slice

    def predicted_memory(self) -> dict:
        e = self.spec.e
        biggest = max(b["padded"] for b in self.plan) * e
        # gloo reduce-scatters by all-reducing a copy of the whole bucket and keeping its
        # slice; the copy lives as long as the collective's work (nccl makes none). gloo's
        # worker drops the work a thread switch after it completes, so the last bucket's
        # staging and copy may still be alive when the optimizer starts: counted there
        gloo = {"gloo's reduced copy": biggest} if "nccl" not in self.ctx.backend else {}
        if self.stage == 1:  # full gradients held in their buckets, scattered in place
            return self.peak_memory(stage=1, grads_held=True, end=gloo, optimizer=gloo)
        late = {"last bucket's staging": biggest, **gloo}
        # ZeRO-2: the shards are the gradients; a bucket's gradients are copied into its
        # staging (then dropped: gloo's copy comes later, in their place) while the
        # previous bucket's reduce-scatter may still be in flight
        flying = min(2, len(self.plan))
        return self.peak_memory(stage=2, grads_held=True,
                                end={"staging": flying * biggest,
                                     "a bucket's gradients (or gloo's copy)": biggest},
                                optimizer=late)

    def predicted_comm(self):
        numels = [p.numel() for p in self.model.parameters()]
        return cost.zero_comm(numels, self.spec.e, self.ctx.world, self.spec.cap_elems)

    def extra(self) -> dict:
        return {"buckets": len(self.buckets)}


class Zero2(Zero1):
    name = "zero2"
    label = "ZeRO-2 by hand (optimizer state and gradients sharded)"
    stage = 2
