"""What a run measured on its host, as the cost model prices with it: a link per collective
(and per group size), the GEMM and attention probes, the per-operator overheads and the
measured peak (jobs/lab/experiments/probes.py calibrates; jobs/lab/predict/cost.py has
the formulas these prices are put into)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

from jobs.lab.predict.cost import COMPUTE_TERMS, busbw_factor


@dataclass
class LinkFit:
    alpha: float  # seconds
    bandwidth: float  # bytes/s of bus bandwidth
    rms_rel_error: float = 0.0  # of the fit against its own samples
    max_rel_error: float = 0.0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (S, expected t)
    # why no α–β line fitted and alpha and bandwidth are fit_link's fallback guess (None:
    # fitted): said in the result, so a card need not guess it from the fit's error
    fallback: str | None = None

    def time(self, op: str, S: float, n: int) -> float:
        return self.alpha + busbw_factor(op, n) * S / self.bandwidth

    def per_call(self, op: str, S: float, n: int) -> float:
        """Seconds of one call of S bytes: read off the calibration's own samples
        (log-log between the two sizes around S; the smallest's below them), and past
        the largest along the fit's slope. A gloo link is not a straight line (its small
        messages can cost more than its middling ones): the fit says alpha and W and how
        far from a line it is; the prediction uses what was measured."""
        pts = sorted(self.samples)
        if not pts:
            return self.time(op, S, n)
        if S <= pts[0][0]:
            return pts[0][1]
        for (s0, t0), (s1, t1) in zip(pts, pts[1:], strict=False):
            if S <= s1:
                w = math.log(S / s0) / math.log(s1 / s0)
                return math.exp((1 - w) * math.log(t0) + w * math.log(t1))
        s_top, t_top = pts[-1]
        return t_top + busbw_factor(op, n) * (S - s_top) / self.bandwidth


def link_key(op: str, n: int, world: int) -> str:
    """The calibration's name of op's link over groups of n ranks: the op itself for the
    whole world (and for point-to-point, whose pairs the world's ring probes), op@n for
    a subgroup."""
    return op if n in (0, world) or op == "send_recv" else f"{op}@{n}"


AFTER_COMPUTE = "+after_compute"  # a link's key + this: its calls probed after compute


def after_compute_shares(collectives: dict, world: int) -> dict[str, float]:
    """{link key: the share of its calls that come after compute} from a census's
    collectives (census.py counts, per group size, the calls with a matrix multiply or
    attention since the collective before). Point-to-point is left out: a pipeline's
    receive waits for its neighbour's compute, and the schedule's formula (its slots and
    bubble) prices that wait; the message itself is priced as a transfer (a receive
    probed after compute priced the pipelines well above their steps: docs/EXPERIMENTS.md,
    *Calls after compute, measured*)."""
    calls: dict[str, list[int]] = {}
    for kind, c in collectives.items():
        if kind in ("send", "recv"):
            continue
        after = c.get("after_compute_by_size", {})
        for n, count in c.get("count_by_size", {}).items():
            row = calls.setdefault(link_key(kind, n, world), [0, 0])
            row[0] += after.get(n, 0)
            row[1] += count
    return {key: a / total for key, (a, total) in calls.items() if total}


def operators(phase: dict) -> int:
    """Operators a census phase ran: each costs the per-operator overhead (DTensor-level
    ones DTensor's dispatch too), and a strategy's hooks are priced per operator."""
    return phase["ops"] + phase["views"] + phase["dtensor_ops"]


def fit_link(op: str, n: int, samples: list[tuple[float, float]]) -> LinkFit:
    """Fit t = alpha + f*S/W over (S, t) samples by least squares on the *relative*
    error (weights 1/t^2), so that sizes spanning decades all count; report how far the
    fitted line is from each sample (rms and worst relative error). Where no line with
    a latency and a bandwidth above zero fits, alpha and W are a guess (the smallest time,
    the largest sample's bandwidth) and ``fallback`` says why."""
    xs = [busbw_factor(op, n) * S for S, _ in samples]
    ts = [t for _, t in samples]
    ws = [1.0 / (t * t) for t in ts]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs, strict=True)) / sw
    mt = sum(w * t for w, t in zip(ws, ts, strict=True)) / sw
    var = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs, strict=True))
    cov = sum(w * (x - mx) * (t - mt) for w, x, t in zip(ws, xs, ts, strict=True))
    slope = cov / var if var else 0.0
    alpha = mt - slope * mx
    fallback = None
    if slope <= 0 or alpha < 0:  # noise: fall back to latency = smallest, W from largest
        fallback = ("the times did not grow with the size" if slope <= 0
                    else "the best line's latency was below zero")
        x_big, t_big = max(zip(xs, ts, strict=True))
        alpha = min(ts)
        grown = t_big - alpha
        if grown < t_big * 1e-3:  # the largest took no longer than the smallest
            fallback += ", so W is a thousand times the largest sample's bus bandwidth"
            grown = t_big * 1e-3
        slope = grown / x_big if x_big else 1e-12
    errs = [(alpha + slope * x) / t - 1 for x, t in zip(xs, ts, strict=True)]
    return LinkFit(alpha=alpha, bandwidth=1.0 / slope,
                   rms_rel_error=math.sqrt(sum(e * e for e in errs) / len(errs)),
                   max_rel_error=max(abs(e) for e in errs), samples=list(samples),
                   fallback=fallback)


@dataclass
class Calibration:
    flops: float  # FLOP/s of one rank while all ranks compute (GEMM of the model's shape)
    peak_flops: float  # the MFU denominator (measured GEMM, or a datasheet peak on GPU)
    links: dict[str, LinkFit] = field(default_factory=dict)
    n: int = 1
    peak_name: str = ""  # what peak_flops is, e.g. "measured 4096^3 float32 GEMM"
    gemm_s: dict[tuple, float] = field(default_factory=dict)  # seconds per call, by shape
    attention_s: dict[tuple, float] = field(default_factory=dict)
    op_s: float = 0.0  # per operator: dispatch, Python, autograd bookkeeping
    dtensor_op_s: float = 0.0  # per DTensor-level operator: its own dispatch
    bandwidth: float = float("inf")  # bytes/s read+written by the other operators
    # every try at a measured peak (each the slowest rank's); peak_flops is the best
    peak_samples: list[float] = field(default_factory=list)
    # the host launches while the device computes (CUDA): compute is max(host, device),
    # not their sum as on a CPU, whose one thread does both
    host_overlaps: bool = False
    # every measure of op_s: the calibration's (op_s, what prices), then one after every
    # timed round - how far a shared host's load moved it while the steps ran, kept to say
    # how much a prediction can be trusted (pricing with their median did not bring the
    # predictions closer: docs/EXPERIMENTS.md, *Repeated runs*)
    op_samples: list[float] = field(default_factory=list)
    # {link key: share of a strategy's calls that come after compute}: set per strategy
    # from its census (for_census); none (every call priced as in a burst) until then
    after_compute: dict[str, float] = field(default_factory=dict)
    # {strategy: {phase: seconds per operator}} of the strategy's own Python beyond its
    # operators (FSDP2's hooks, DTensor's redistributions and module hooks): probed on the
    # strategy itself over a model of tiny widths (jobs/lab/experiments/hooks.py), for the
    # strategies that declare it
    hooks: dict[str, dict[str, float]] = field(default_factory=dict)
    # {link key: CPU seconds of compute the steps run before a call after compute}: what
    # the after-compute links were probed after (probes.segment_seconds)
    segment_s: dict[str, float] = field(default_factory=dict)
    # {link key: every timed round's ratio of its calls to their price} (experiments/
    # links.py, LinkDrift): how far a link moved while the steps ran, kept to say how far
    # its price can be trusted (pricing with the median ratio did not bring the
    # predictions closer: docs/EXPERIMENTS.md, *Calls after compute, measured*)
    link_ratios: dict[str, list[float]] = field(default_factory=dict)

    def for_census(self, collectives: dict) -> Calibration:
        """This calibration for the strategy whose census counted these collectives: each
        link's calls priced by how the strategy issues them, after compute or back to
        back."""
        return dataclasses.replace(self, after_compute=after_compute_shares(collectives,
                                                                            self.n))

    def add_peak_samples(self, samples: list[float]) -> None:
        """More tries at the measured peak: the best of them all is the peak (a try on a
        shared machine can only be slowed, never sped up)."""
        self.peak_samples += samples
        self.peak_flops = max([self.peak_flops, *samples])

    def add_op_samples(self, samples: list[float]) -> None:
        self.op_samples += samples

    def coll(self, op: str, S: float, count: int = 1, n: int | None = None) -> float:
        """count calls moving S bytes in all (each S/count), over a group of n ranks (the
        world's when None): priced with that group size's own link when one was
        calibrated (a 2-rank all-reduce is not an 8-rank one), else the world's; the
        share of them that comes after compute (``after_compute``) with that link as
        probed after compute, the rest as probed back to back."""
        n = self.n if n is None else n
        if S <= 0 or count == 0 or self.n == 1 or n == 1:
            return 0.0  # one rank moves nothing (and no link was calibrated)
        key = link_key(op, n, self.n)
        burst = self.links.get(key) or self.links[op]
        after = self.links.get(key + AFTER_COMPUTE) or burst
        share = self.after_compute.get(key, 0.0)
        return count * ((1 - share) * burst.per_call(op, S / count, n)
                        + share * after.per_call(op, S / count, n))

    def comm(self, comm: dict, n: int | None = None) -> float:
        """Seconds of a {kind: {bytes, count}} table (send and recv ride one link), over a
        group of n ranks (the world's when None)."""
        total = 0.0
        for kind, c in comm.items():
            op = "send_recv" if kind in ("send", "recv") else kind
            total += self.coll(op, c["bytes"], c["count"] or 1, n)
        return total

    def compute(self, phases: dict, only: tuple[str, ...] | None = None,
                share: float = 1.0, hooks: dict[str, float] | None = None) -> dict[str, float]:
        """Seconds per compute term of a census's phases (all, or those named); with
        host_overlaps, op_overhead (and hooks) is the host's time beyond the device's, so
        the terms add up to max(host, device). On CPU the probes count CPU time: a rank
        whose thread got `share` of a core while it wanted one takes 1/share as long.
        `hooks` ({phase: seconds per operator}, a strategy's entry of ``self.hooks``)
        adds a `hooks` term: the strategy's own Python, per operator of each phase."""
        out = dict.fromkeys(COMPUTE_TERMS, 0.0) | ({"hooks": 0.0} if hooks is not None else {})
        for name, ph in phases.items():
            if only is not None and name not in only:
                continue
            out["gemm"] += sum(k * self.gemm_s[key] for key, k in ph["gemm"].items())
            out["attention"] += sum(k * self.attention_s[key]
                                    for key, k in ph["attention"].items())
            out["op_overhead"] += ((ph["ops"] + ph["views"]) * self.op_s
                                   + ph["dtensor_ops"] * self.dtensor_op_s)
            out["memory_traffic"] += ph["bytes"] / self.bandwidth
            if hooks is not None:
                out["hooks"] += operators(ph) * hooks.get(name, 0.0)
        if self.host_overlaps:  # only the host's time beyond the device's shows
            device = out["gemm"] + out["attention"] + out["memory_traffic"]
            host = out["op_overhead"] + out.get("hooks", 0.0)
            shown = max(0.0, host - device) / host if host else 0.0
            for k in ("op_overhead", "hooks"):
                if k in out:
                    out[k] *= shown
        elif share < 1.0:
            out = {k: v / max(share, 1e-3) for k, v in out.items()}
        return out

    def as_dict(self) -> dict:
        return {"flops": self.flops, "peak_flops": self.peak_flops, "n": self.n,
                "peak_name": self.peak_name, "peak_samples": self.peak_samples,
                "peak_spread": {"n": len(self.peak_samples), "min": min(self.peak_samples),
                                "median": statistics.median(self.peak_samples),
                                "max": max(self.peak_samples), "kept": "best"}
                if self.peak_samples else None, "op_s": self.op_s,
                "op_spread": {"n": len(self.op_samples), "min": min(self.op_samples),
                              "median": statistics.median(self.op_samples),
                              "max": max(self.op_samples), "kept": "calibration"}
                if self.op_samples else None,
                "dtensor_op_s": self.dtensor_op_s, "hooks_per_op_s": self.hooks,
                "bandwidth_Bps": self.bandwidth,
                "host_overlaps": self.host_overlaps,
                "segment_s": self.segment_s,
                "link_drift": {k: {"ratios": v, "n": len(v), "min": min(v),
                                   "median": statistics.median(v), "max": max(v),
                                   "kept": "calibration"}
                               for k, v in self.link_ratios.items() if v},
                "gemm_shapes": len(self.gemm_s), "attention_shapes": len(self.attention_s),
                "links": {k: {"alpha_s": v.alpha, "busbw_Bps": v.bandwidth,
                              "rms_rel_error": v.rms_rel_error,
                              "max_rel_error": v.max_rel_error, "fallback": v.fallback,
                              "samples": [{"bytes": S, "time_s": t} for S, t in v.samples]}
                          for k, v in self.links.items()}}
