"""The correctness gate: a few optimizer steps (GATE_STEPS, different data each) compared
after every step with the single-device full-batch reference. A strategy that fails is
not timed, and the run fails naming the step, the tensor and the error.

After each step: the loss, every gradient, every parameter and the optimizer state
(SGD's momentum; AdamW's two moments) must match. One step is not enough: after it
the momentum *is* the gradient, so an optimizer that forgets its state would pass.
Tolerances are per tensor: |got - ref| <= rtol*|ref| + atol*max|ref|, relative to
each element and to the tensor's own scale (a fixed absolute atol would be a large
fraction of a small gradient and nothing for a large one); the worst relative error
max|got - ref| / max|ref| is reported. Every element of every gradient, parameter and
state tensor must be held by some rank, and as often as every other element of that
tensor (once, or once per replica): a shard with a hole or an overlap fails even when
another piece of the same parameter exists. Replicated tensors must be bit-identical across ranks. A
hand-written pipeline must run its schedule's (forward|backward, micro-batch) order,
read from the events it recorded, which also bounds the micro-batches it holds.
Two whole-model checks sit above the per-tensor ones, because bf16's per-tensor tolerance
is wide enough to hide an error that touches everything alike (a loss divided by m+1
instead of m scales every gradient, and AdamW's update hardly notices a scale): the loss
and the global gradient norm must each match the reference's to loss_rtol and norm_rtol.
Everything here is bookkeeping: CPU copies over ctx.cpu_group, except the replica
check, which compares device tensors over the strategy's own group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from jobs.lab.components.context import Context
from jobs.lab.components.model import Batch, ModelConfig, build_model, loss_fn, make_batch
from jobs.lab.components.optim import make_optimizer, state_of
from jobs.lab.strategies.base import Piece, Strategy

GATE_STEPS = 3  # >= 3: a wrong momentum shows from the second step on, and compounds


@dataclass(frozen=True)
class Tolerance:
    name: str
    rtol: float  # of each element's reference value
    atol: float  # of the tensor's largest reference magnitude
    loss_rtol: float  # the global loss, relative
    norm_rtol: float  # the global gradient norm's ratio to the reference's, less 1


# float32: the gated strategies differ from the reference by <= 1.3e-6 of a tensor's scale
# after 3 steps (sums split in other orders; 7e-7 for the zero-in-exact-arithmetic tensors
# at FLOOR), ~80x below; a lost all_reduce or a forgotten momentum is O(1). bfloat16 (GPU
# runs, whose kernels and nccl reduce in other orders): assert_close's bf16 rtol, scaled.
# The loss and the gradient norm are sums over every element, where bf16's rounding
# averages out: held to a fraction of the 1% error the gate must catch.
TOLERANCES = {"float32": Tolerance("float32", 1e-4, 1e-4, 1e-4, 1e-4),
              "bfloat16": Tolerance("bfloat16", 1.6e-2, 1.6e-2, 4e-3, 4e-3),
              "bf16_compute": Tolerance("bf16_compute", 0.15, 0.15, 4e-3, 4e-3)}
KINDS = ("grad", "param", "state")
FLOOR = 1e-2  # no tensor's scale below this fraction of the largest of its kind


@dataclass
class RefStep:
    loss: float
    grad: dict[str, torch.Tensor]  # on CPU: the reference costs no device memory
    param: dict[str, torch.Tensor]
    state: dict[str, torch.Tensor]


def gate_batches(cfg: ModelConfig, batch_size: int) -> list[Batch]:
    return [make_batch(cfg, batch_size, step=k) for k in range(GATE_STEPS)]


def reference_steps(cfg: ModelConfig, batches: list[Batch], device: torch.device,
                    precision: str = "fp32_sgd") -> list[RefStep]:
    model = build_model(cfg, device)
    opt = make_optimizer(list(model.parameters()), precision)
    named = list(model.named_parameters())
    steps = []
    for batch in batches:
        b = batch.to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(cfg.kind)(model(b.inputs), b.targets)
        loss.backward()
        opt.step()
        steps.append(RefStep(
            loss.item(),
            {n: p.grad.detach().cpu().clone() for n, p in named},
            {n: p.detach().cpu().clone() for n, p in named},
            {n + suffix: t.detach().cpu().clone() for n, p in named
             for suffix, t in state_of(opt, p, precision)}))
    return steps


def compare(name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance,
            floor: float = 0.0) -> dict[str, Any]:
    """Element-wise within rtol*|want| + atol*scale, scale = max|want| (at least floor)."""
    got = got.detach().float().cpu()
    want = want.detach().float().cpu()
    if got.shape != want.shape:
        return {"tensor": name, "ok": False, "max_abs_error": float("inf"),
                "max_rel_error": float("inf"), "excess": float("inf"),
                "detail": f"shape {tuple(got.shape)} != reference {tuple(want.shape)}"}
    if not want.numel():
        return {"tensor": name, "ok": True, "max_abs_error": 0.0, "max_rel_error": 0.0,
                "excess": 0.0}
    diff = (got - want).abs()
    scale = want.abs().max().clamp_min(floor)
    allowed = (tol.atol * scale + tol.rtol * want.abs()).clamp_min(torch.finfo().tiny)
    excess = (diff / allowed).max().item()
    worst = diff.max().item()
    rel = worst / scale.item() if scale > 0 else (0.0 if worst == 0 else float("inf"))
    return {"tensor": name, "ok": bool(excess <= 1.0), "max_abs_error": worst,
            "max_rel_error": rel, "excess": excess}


def _check_pieces(kind: str, pieces: list[Piece], ref: dict[str, torch.Tensor],
                  offsets: dict[str, int], counts: torch.Tensor, tol: Tolerance) -> list[dict]:
    """Compare each piece with its part of the reference, and count which elements of
    the reference it holds (counts: one uint8 per reference element, flat). A tensor that
    is zero in exact arithmetic (attention's key bias gets no gradient: softmax ignores a
    shift every key shares) holds rounding noise on both sides, so no tensor's scale is
    taken below FLOOR of the largest of its kind (AdamW's moments: of its moment - the
    second is the first's square)."""
    floors: dict[str, float] = {}
    for name, t in ref.items():
        if t.numel():
            family = _family(name)
            floors[family] = max(floors.get(family, 0.0), FLOOR * t.abs().max().item())
    results = []
    for piece in pieces:
        if piece.name not in ref:
            results.append({"tensor": f"{kind}:{piece.name}", "ok": False,
                            "max_abs_error": float("inf"), "max_rel_error": float("inf"),
                            "excess": float("inf"),
                            "detail": "no such parameter in the reference model"})
            continue
        if piece.tensor is None:
            continue  # reported by the coverage check
        want = ref[piece.name]
        index = torch.arange(want.numel()).view(want.shape)
        if piece.select:
            want, index = piece.select(want), piece.select(index)
        held = offsets[piece.name] + index.reshape(-1)
        counts.index_put_((held,), torch.ones(held.numel(), dtype=torch.uint8), accumulate=True)
        results.append(compare(f"{kind}:{piece.name}", piece.tensor, want, tol,
                               floors.get(_family(piece.name), 0.0)))
    return results


def _family(name: str) -> str:
    """Tensors judged against one floor: an AdamW moment's, or every other."""
    return next((k for k in (".exp_avg_sq", ".exp_avg") if name.endswith(k)), "")


def _coverage(counts: torch.Tensor, ref: dict[str, torch.Tensor],
              offsets: dict[str, int]) -> list[str]:
    """Per tensor: elements no rank holds, or held more often than others of the tensor."""
    faults = []
    for name, t in ref.items():
        c = counts[offsets[name]:offsets[name] + t.numel()]
        missing = int((c == 0).sum())
        if missing:
            faults.append(f"{name}: {missing} of {t.numel()} elements held by no rank")
        elif c.min() != c.max():
            faults.append(f"{name}: elements held unevenly ({int(c.min())} to "
                          f"{int(c.max())} copies)")
    return faults


def _replicas_differing(ctx: Context, groups: list[tuple[Any, list]]) -> list[str]:
    """Names of replicated tensors that differ, bit for bit, from the group's first rank's
    copy (device tensors, over the strategy's group)."""
    differing = []
    for group, named in groups:
        if not named:
            continue
        group = ctx.group if group is None else group
        flat = torch.cat([t.detach().reshape(-1).float() for _, t in named])
        first = flat.clone()
        dist.broadcast(first, group=group, group_src=0)
        offset = 0
        for name, t in named:
            k = t.numel()
            if not torch.equal(flat[offset:offset + k], first[offset:offset + k]):
                differing.append(name)
            offset += k
    return differing


def _in_flight(order: list[tuple]) -> int:
    held = most = 0
    for kind, *_ in order:
        held += 1 if kind == "forward" else -1
        most = max(most, held)
    return most


def _schedule(events: list[dict], expected: list[tuple]) -> dict[str, Any]:
    """(kind, micro-batch) - or, for schedules with virtual stages, (kind, micro-batch,
    chunk), written F3.1 - as the events recorded them."""
    width = len(expected[0]) if expected else 2
    ran = [(e["kind"], e.get("mb"), e.get("chunk"))[:width] for e in events
           if e["kind"] in ("forward", "backward")]

    def text(order: list[tuple]) -> str:
        return " ".join(f"{k[0].upper()}{mb}" + "".join(f".{c}" for c in rest)
                        for k, mb, *rest in order)
    return {"order_ok": ran == [tuple(x) for x in expected], "max_in_flight": _in_flight(ran),
            "bound": _in_flight(expected), "ran": text(ran), "expected": text(expected)}


def _step(ctx: Context, strategy: Strategy, active: bool, batch: Batch, ref: RefStep,
          tol: Tolerance) -> dict[str, Any]:
    """One gate step on every rank; every rank returns the same findings."""
    first_event = len(ctx.timeline.events)
    out = strategy.train_step(batch) if active else None
    expected = strategy.expected_order() if active else None
    schedule = _schedule(ctx.timeline.events[first_event:], expected) if expected else None
    checks: list[dict] = []
    faults: dict[str, list[str]] = {}
    squares: dict[str, float] = {}
    copies: dict[str, int] = {}
    for kind in KINDS:
        want = getattr(ref, kind)  # state has one tensor per parameter and moment
        offsets, total = {}, 0
        for name, t in want.items():
            offsets[name], total = total, total + t.numel()
        counts = torch.zeros(total, dtype=torch.uint8)
        if active:
            pieces = getattr(strategy, f"{kind}_pieces")()
            checks += _check_pieces(kind, pieces, want, offsets, counts, tol)
            if kind == "grad":
                squares = _squares(pieces)
        counts = ctx.sum_cpu(counts)
        faults[kind] = _coverage(counts, want, offsets)
        if kind == "grad":
            copies = {n: max(1, int(counts[offsets[n]:offsets[n] + t.numel()].max()))
                      for n, t in want.items() if t.numel()}
    differing = _replicas_differing(ctx, strategy.replicated()) if active else []
    reports = ctx.gather({"share": float(out.loss) * out.weight if out else 0.0,
                          "checks": checks, "differing": differing, "schedule": schedule,
                          "squares": squares})
    loss = sum(r["share"] for r in reports)
    loss_check = compare("loss", torch.tensor(loss), torch.tensor(ref.loss), tol)
    # each element once, however many ranks hold it (coverage checks they hold it evenly)
    got_sq = sum(v / copies.get(n, 1) for r in reports for n, v in r["squares"].items())
    want_sq = sum(t.double().pow(2).sum().item() for t in ref.grad.values())
    return {"loss": loss, "checks": [loss_check] + [c for r in reports for c in r["checks"]],
            "coverage": faults, "differing": sorted({d for r in reports for d in r["differing"]}),
            "schedules": [(r, s) for r, s in enumerate(x["schedule"] for x in reports) if s],
            "loss_rel_error": abs(loss - ref.loss) / max(abs(ref.loss), torch.finfo().tiny),
            "grad_norm_ratio": (got_sq / want_sq) ** 0.5 if want_sq > 0 else 1.0}


def _squares(pieces: list[Piece]) -> dict[str, float]:
    """Sum of squares of the gradient this rank holds, per parameter."""
    out: dict[str, float] = {}
    for piece in pieces:
        if piece.tensor is not None:
            sq = piece.tensor.detach().double().pow(2).sum().item()
            out[piece.name] = out.get(piece.name, 0.0) + sq
    return out


def _reason(step: int, found: dict, tol: Tolerance) -> str | None:
    at = f"step {step + 1} of {GATE_STEPS}"
    failures = [c for c in found["checks"] if not c["ok"]]
    if failures:
        worst = max(failures, key=lambda c: c["excess"])
        return (f"{worst['tensor']} differs from the single-device reference at {at}: max abs "
                f"error {worst['max_abs_error']:.3g}, max rel error {worst['max_rel_error']:.3g}"
                f" (rtol={tol.rtol:g}, atol={tol.atol:g} x max|ref|)"
                + (f"; {worst['detail']}" if worst.get("detail") else ""))
    for kind in KINDS:
        if found["coverage"][kind]:
            return (f"{kind} coverage at {at}: {found['coverage'][kind][0]} "
                    f"({len(found['coverage'][kind])} tensor(s) in all)")
    if found["differing"]:
        return f"replicated parameter {found['differing'][0]} is not bit-identical across ranks"
    if found["loss_rel_error"] > tol.loss_rtol:
        return (f"loss differs from the single-device reference at {at}: {found['loss']:.6g} "
                f"against {found['reference_loss']:.6g}, {found['loss_rel_error']:.2%} off "
                f"(loss_rtol={tol.loss_rtol:g})")
    if abs(found["grad_norm_ratio"] - 1) > tol.norm_rtol:
        return (f"global gradient norm differs from the single-device reference at {at}: "
                f"{found['grad_norm_ratio']:.5f} of it (norm_rtol={tol.norm_rtol:g})")
    for rank, s in found["schedules"]:
        if not s["order_ok"] or s["max_in_flight"] > s["bound"]:
            return (f"schedule at {at}: stage {rank} ran {s['ran']}; its schedule is "
                    f"{s['expected']} (at most {s['bound']} micro-batches in flight, it held "
                    f"{s['max_in_flight']})")
    return None


def gate(ctx: Context, strategy: Strategy, batches: list[Batch], ref: list[RefStep],
         tol: Tolerance = TOLERANCES["float32"]) -> dict[str, Any]:
    """Run the gate's steps, checking after each; stop at the first that fails."""
    active = strategy.ranks_active == "all" or ctx.rank == 0
    losses, seen, reason, step, found = [], [], None, 0, {}
    loss_errors: list[float] = []
    norm_ratios: list[float] = []
    for step, (batch, want) in enumerate(zip(batches, ref, strict=True)):
        found = _step(ctx, strategy, active, batch, want, tol)
        found["reference_loss"] = want.loss
        losses.append(found["loss"])
        seen += found["checks"]
        loss_errors.append(found["loss_rel_error"])
        norm_ratios.append(found["grad_norm_ratio"])
        reason = _reason(step, found, tol)
        if reason:
            break

    def worst(kind: str, key: str) -> float:
        vals = [c[key] for c in seen if c["tensor"].split(":")[0] == kind]
        return max(vals) if vals else 0.0

    schedules = [s for _, s in found["schedules"]]
    return {
        "passed": reason is None,
        "reason": reason,
        "loss": losses[-1],
        "reference_loss": ref[len(losses) - 1].loss,
        "losses": losses,
        "reference_losses": [r.loss for r in ref[:len(losses)]],
        "loss_abs_error": worst("loss", "max_abs_error"),
        "loss_rel_errors": loss_errors,
        "grad_norm_ratios": norm_ratios,
        "max_grad_abs_error": worst("grad", "max_abs_error"),
        "max_param_abs_error": worst("param", "max_abs_error"),
        "max_state_abs_error": worst("state", "max_abs_error"),
        "max_grad_rel_error": worst("grad", "max_rel_error"),
        "max_param_rel_error": worst("param", "max_rel_error"),
        "max_state_rel_error": worst("state", "max_rel_error"),
        "max_rel_error": max((c["max_rel_error"] for c in seen), default=0.0),
        "worst_tensor": max(seen, key=lambda c: c["excess"])["tensor"] if seen else None,
        "tensors_checked": len(found["checks"]),
        "steps_checked": step + 1,
        "all_params_have_grad": not any("held by no rank" in f for f in found["coverage"]["grad"]),
        "coverage_exact": not any(found["coverage"].values()),
        "replicas_bit_identical": not found["differing"],
        "schedule": {"checked": True, "order_ok": all(s["order_ok"] for s in schedules),
                     "max_in_flight": [s["max_in_flight"] for s in schedules],
                     "bound": [s["bound"] for s in schedules]} if schedules else None,
        "tolerance": tol.name,
        "rtol": tol.rtol,
        "atol": tol.atol,
        "loss_rtol": tol.loss_rtol,
        "norm_rtol": tol.norm_rtol,
        "atol_basis": "x max|reference| per tensor",
    }
