"""A mixture-of-experts GPT's arithmetic - plain numbers, no torch (jobs/lab/components/moe.py is
the layer; docs/EXPERIMENTS.md, *Expert parallelism*).

Every block's MLP becomes E experts, each an MLP of the dense MLP's own shape (h -> 4h
-> h, 8h^2 + 5h parameters: Switch Transformer's choice), and a router (h -> E, no
bias). Each token goes to its top-k experts. Capacity is per sequence (GShard's
"group" is one sequence): an expert takes at most

    C = ceil(capacity_factor * k * s / E)

of a sequence's s tokens, first choices before second choices, earlier tokens first;
the rest are dropped (their MLP output is zero: the residual carries them). Capacity
buffers have static shapes: b sequences fill E * b * C rows of h, used or not.

    parameters   dense - L(8h^2 + 5h) + L(E(8h^2 + 5h) + hE)      (total, held somewhere)
    active       dense + L hE  (k = 1), + L(k - 1)(8h^2 + 5h)       (what one token uses)
    FLOPs/token  6 x active matmul parameters + 12 L h s          (k experts, router)

The FLOPs count the experts a token is routed to (the literature's "active"
parameters); the hardware runs every capacity slot, capacity_factor times the experts'
share - ``slot_flops_per_token`` gives that.
"""

from __future__ import annotations

import math

from jobs.lab.predict import cost


def expert_params(h: int) -> int:
    """One expert: fc (h -> 4h) and proj (4h -> h), with biases - the dense MLP."""
    return 8 * h * h + 5 * h


def capacity(E: int, k: int, factor: float, s: int) -> int:
    """Slots an expert has per sequence of s tokens (at least one)."""
    return max(1, math.ceil(factor * k * s / E))


def param_count(L: int, h: int, s: int, v: int, E: int, tied: bool = False) -> int:
    dense = cost.param_count("gpt", L, h, s, v, tied)
    return dense + L * ((E - 1) * expert_params(h) + h * E)


def expert_param_count(L: int, h: int, E: int) -> int:
    """Parameters inside the experts (split over the ranks by expert parallelism)."""
    return L * E * expert_params(h)


def matmul_params(L: int, h: int, s: int, v: int, E: int, k: int, tied: bool = False) -> int:
    """Active matmul parameters per token: the dense model's, the router, k experts."""
    dense = cost.matmul_params("gpt", L, h, s, v, tied)
    return dense + L * ((k - 1) * expert_params(h) + h * E)


def flops_per_token(L: int, h: int, s: int, v: int, E: int, k: int,
                    tied: bool = False) -> int:
    return 6 * matmul_params(L, h, s, v, E, k, tied) + 12 * L * h * s


def slot_flops_per_token(L: int, h: int, s: int, E: int, k: int, factor: float) -> float:
    """Expert FLOPs the capacity buffers cost per token (every slot computed)."""
    return 6 * L * (8 * h * h) * E * capacity(E, k, factor, s) / s


def dispatch_rows(E: int, k: int, factor: float, s: int, sequences: int) -> int:
    """Rows of one capacity buffer for `sequences` sequences: E x b x C."""
    return E * sequences * capacity(E, k, factor, s)


def alltoall_bytes(L: int, h: int, E: int, k: int, factor: float, s: int, sequences: int,
                   e: int) -> dict[str, int]:
    """Per optimizer step on one rank holding `sequences` sequences: dispatch and
    combine in forward, their two transposes in backward, per layer - 4L calls of the
    whole buffer (nccl-tests counts all_to_all by its input)."""
    one = dispatch_rows(E, k, factor, s, sequences) * h * e
    return {"bytes": 4 * L * one, "count": 4 * L}


def block_activation_delta(n: int, h: int, E: int, k: int, factor: float, s: int,
                           e: int) -> float:
    """What a MoE block saves for backward beyond the dense block's, for n tokens
    (n/s sequences, R = E x (n/s) x C buffer rows on this rank, whichever rank computes
    them). The dense MLP saves its GeLU's input and output (8nh); the MoE layer saves
    the experts' input rows, GeLU input and output (9Rh), the combined rows and their
    weights (knh + kn), the router's probabilities (fp32, nE), top-k's indices and the
    gather's (int64, 2kn), the buffer's source index (int64, R), the kept mask (bool,
    kn), with k > 1 the top-k probabilities and their sum (fp32, kn + n), and when the
    recipe is not fp32 the router's fp32 copies of its input and weight (4nh + 4hE)."""
    R = dispatch_rows(E, k, factor, s, n // s)
    renormalised = 4 * (k * n + n) if k > 1 else 0
    fp32_router = 4 * (n * h + h * E) if e != 4 else 0
    return ((9 * R - 8 * n + k * n) * h * e + k * n * e + 4 * n * E + 16 * k * n + 8 * R
            + k * n + renormalised + fp32_router)


def backward_working_set(n: int, h: int, E: int, k: int, factor: float, s: int,
                         e: int) -> float:
    """What a MoE block's backward adds at its widest: the gradient into the block (nh),
    the combined rows' (knh) and the capacity buffer's (Rh), beside one expert's inner
    gradients at a time (GeLU output's and input's: 8 x its R/E rows x h)."""
    R = dispatch_rows(E, k, factor, s, n // s)
    return (n + k * n + R + 8 * R / E) * h * e
