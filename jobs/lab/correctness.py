"""The correctness gate: one step on fixed data, compared with the single-device
full-batch reference. Loss, every gradient and every parameter after the optimizer
step must match (fp32: torch.testing.assert_close's defaults, rtol 1.3e-6 and
atol 1e-5); every parameter must have received a gradient somewhere; replicated
parameters must be bit-identical across the ranks that replicate them. A strategy
that fails is not timed, and the run fails with the tensor and the error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from jobs.lab.model import Batch, ModelConfig, build_model, loss_fn
from jobs.lab.runtime import Context
from jobs.lab.strategies.base import Piece, Strategy, sgd

RTOL, ATOL = 1.3e-6, 1e-5  # torch.testing.assert_close defaults for float32
BF16_RTOL, BF16_ATOL = 1.6e-2, 1e-5


@dataclass
class Reference:
    loss: float
    grads: dict[str, torch.Tensor]
    params_after: dict[str, torch.Tensor]


def reference_step(cfg: ModelConfig, batch: Batch, device: torch.device) -> Reference:
    model = build_model(cfg, device)
    opt = sgd(list(model.parameters()))
    b = batch.to(device)
    loss = loss_fn(cfg.kind)(model(b.inputs), b.targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return Reference(loss.item(), grads, params)


def _compare(name: str, got: torch.Tensor, want: torch.Tensor, rtol: float,
             atol: float) -> dict[str, Any]:
    got = got.detach().float().to(want.device)
    want = want.detach().float()
    if got.shape != want.shape:
        return {"tensor": name, "ok": False, "max_abs_error": float("inf"),
                "detail": f"shape {tuple(got.shape)} != reference {tuple(want.shape)}"}
    diff = (got - want).abs()
    allowed = atol + rtol * want.abs()
    excess = (diff / allowed).max().item() if diff.numel() else 0.0
    return {"tensor": name, "ok": bool(excess <= 1.0), "max_abs_error": diff.max().item()
            if diff.numel() else 0.0, "excess": excess}


def _check_pieces(kind: str, pieces: list[Piece], ref: dict[str, torch.Tensor],
                  rtol: float, atol: float) -> tuple[list[dict], set[str]]:
    results, covered = [], set()
    for piece in pieces:
        if piece.name not in ref:
            results.append({"tensor": f"{kind}:{piece.name}", "ok": False,
                            "max_abs_error": float("inf"),
                            "detail": "no such parameter in the reference model"})
            continue
        if piece.tensor is None:
            continue  # reported by the coverage check below
        covered.add(piece.name)
        want = ref[piece.name]
        want = piece.select(want) if piece.select else want
        results.append(_compare(f"{kind}:{piece.name}", piece.tensor, want, rtol, atol))
    return results, covered


def _replicas_identical(groups: list[tuple[Any, list[tuple[str, torch.Tensor]]]]) -> list[str]:
    """Names of replicated tensors that differ from another rank's copy (bit for bit)."""
    differing = []
    for group, named in groups:
        if not named:
            continue
        flat = torch.cat([t.detach().reshape(-1).float() for _, t in named])
        n = dist.get_world_size(group)
        gathered = [torch.empty_like(flat) for _ in range(n)]
        dist.all_gather(gathered, flat, group=group)
        offset = 0
        for name, t in named:
            k = t.numel()
            views = [g[offset:offset + k] for g in gathered]
            if not all(torch.equal(views[0], v) for v in views[1:]):
                differing.append(name)
            offset += k
    return differing


def gate(ctx: Context, strategy: Strategy, batch: Batch, ref: Reference,
         rtol: float = RTOL, atol: float = ATOL) -> dict[str, Any]:
    """Run one step and check it; every rank returns the same verdict."""
    active = strategy.ranks_active == "all" or ctx.rank == 0
    out = strategy.train_step(batch) if active else None
    share = torch.tensor([out.loss * out.weight if out else 0.0], dtype=torch.float64)
    dist.all_reduce(share)
    checks: list[dict] = []
    covered: set[str] = set()
    if active:
        grad_checks, covered = _check_pieces("grad", strategy.grad_pieces(), ref.grads,
                                             rtol, atol)
        param_checks, _ = _check_pieces("param", strategy.param_pieces(), ref.params_after,
                                        rtol, atol)
        checks = grad_checks + param_checks
    differing = _replicas_identical(strategy.replicated()) if active else []
    reports = ctx.gather({"checks": checks, "covered": sorted(covered),
                          "differing": differing})

    loss_check = _compare("loss", torch.tensor(share.item()), torch.tensor(ref.loss), rtol,
                          atol)
    all_checks = [loss_check] + [c for r in reports for c in r["checks"]]
    covered_all = set().union(*(r["covered"] for r in reports))
    missing = sorted(set(ref.grads) - covered_all)
    differ = sorted({d for r in reports for d in r["differing"]})
    failures = [c for c in all_checks if not c["ok"]]
    worst = max(failures or all_checks, key=lambda c: c.get("excess", float("inf")))
    reason = None
    if failures:
        reason = (f"{worst['tensor']} differs from the single-device reference: max abs error "
                  f"{worst['max_abs_error']:.3g} (rtol={rtol:g}, atol={atol:g})"
                  + (f"; {worst['detail']}" if worst.get("detail") else ""))
    elif missing:
        reason = f"parameter {missing[0]} got no gradient on any rank ({len(missing)} in all)"
    elif differ:
        reason = f"replicated parameter {differ[0]} is not bit-identical across ranks"

    def max_err(prefix: str) -> float:
        vals = [c["max_abs_error"] for c in all_checks if c["tensor"].startswith(prefix)]
        return max(vals) if vals else 0.0

    return {
        "passed": reason is None,
        "reason": reason,
        "loss": share.item(),
        "reference_loss": ref.loss,
        "loss_abs_error": loss_check["max_abs_error"],
        "max_grad_abs_error": max_err("grad:"),
        "max_param_abs_error": max_err("param:"),
        "worst_tensor": worst["tensor"],
        "tensors_checked": len(all_checks),
        "all_params_have_grad": not missing,
        "replicas_bit_identical": not differ,
        "rtol": rtol,
        "atol": atol,
    }
