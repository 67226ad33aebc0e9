"""Learning from the catalogue: for each experiment, one plain-language line of what you
will see, a small diagram (templates/experiments/_diagrams.html, same name), and a first
run small enough to finish in seconds on a CPU; and a path through them in an order that
builds understanding.

The catalogue itself (names, parameters, bounds) is the lab's (jobs/lab/catalogue/registry.py);
this is the page's way of teaching it. tests/app/web/test_learning.py checks that every
experiment in the catalogue has a guide, a diagram, and a first run the registry accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from jobs.lab.catalogue import registry
from jobs.lab.predict import estimate, whatif

# What every first run shares: CPU ranks over gloo (any runner can take it), a model small
# enough that a step is milliseconds, five timed steps (the fewest whose median and spread
# the lab trusts: jobs/lab/experiments/timing.py), one untimed warm-up.
_TINY = {"device": "cpu", "steps": 5, "warmup": 1, "batch_size": 4, "seq_len": 16,
         "hidden": 32, "layers": 2, "heads": 2, "vocab": 64}
# A pipeline's micro-batch must carry more compute than its per-operator overhead and its
# two messages, or splitting the batch only adds them: a wider model, a larger batch.
_PIPELINE = {**_TINY, "world_size": 2, "micro_batches": 4, "batch_size": 16, "seq_len": 32,
             "hidden": 256, "layers": 4, "heads": 4, "vocab": 256}


@dataclass(frozen=True)
class Guide:
    see: str  # what you will see, in a sentence a newcomer can read
    first_run: dict = field(default_factory=dict)  # parameters over the defaults
    learn: str = ""  # on the path: what this step teaches that the next one builds on
    # what a CPU host may not show, said before the run, with what the calculator predicts
    # where it does show (its words, and a link to the calculator with those inputs)
    caveat: str = ""
    elsewhere: str = ""
    calculator: str = ""


def pipelining_on_gpus() -> tuple[str, str]:
    """The calculator's answer to "does pipelining beat naive model parallel?" on GPUs:
    the same model and batch on 4 stages, one micro-batch (naive) against sixteen (GPipe);
    its sentence and the calculator's URL query for the pipelined one."""
    base = {"model": "1b", "gpu": "h100", "dp": 1, "pp": 4, "batch_size": 32}
    answers = {}
    for m in (1, 16):
        c = whatif.parse({**base, "micro_batches": m})
        hw = whatif.preset_hardware(c["gpu"], c["efficiency"], c["memory_gb"])
        answers[m] = estimate.estimate(c, hw)
    naive, piped = (answers[m]["time"]["step_time_s"] for m in (1, 16))
    one, many = answers[1], answers[16]
    sentence = (
        "On GPUs, where each stage has its own device, the calculator predicts the textbook "
        f"effect: a {one['model']['label']} model split over 4 {one['gpu']['name']} GPUs, "
        f"batch 32, steps in {naive:.2f} s as naive model parallel (1 micro-batch, bubble "
        f"{one['bubble_fraction']:.0%}) and in {piped:.2f} s as GPipe with 16 micro-batches "
        f"(bubble {many['bubble_fraction']:.0%}): {naive / piped:.1f}x faster.")
    return sentence, urlencode({**base, "micro_batches": 16})


_PIPELINE_ON_GPUS = pipelining_on_gpus()


GUIDES: dict[str, Guide] = {
    "collectives": Guide(
        "How long each collective (all-reduce, all-gather, …) takes as the message grows, "
        "and the link speed it reaches: the numbers every other prediction is built on.",
        {"device": "cpu", "world_size": 2, "ops": ["all_reduce", "all_gather"],
         "min_bytes": 1024, "max_bytes": 65536, "iters": 3, "warmup": 1,
         "measure_overhead": False},
    ),
    "gemm_roofline": Guide(
        "How many FLOP/s a matrix multiply reaches at each size, and where it stops waiting "
        "on memory and becomes limited by compute.",
        {"device": "cpu", "sizes": ["64", "128", "256"], "iters": 2},
    ),
    "data_parallel": Guide(
        "The same model trained on two ranks three ways — gradients all-reduced at the end, "
        "in buckets while backward still runs, and PyTorch's DDP — with identical results "
        "and different step times.",
        {**_TINY, "world_size": 2},
        "Every rank keeps the whole model; only the data is split. Communication is one "
        "all-reduce of the gradients per step.",
    ),
    "pipeline": Guide(
        "Two stages passing micro-batches, the idle share (bubble) of GPipe and 1F1B against "
        "naive model parallel; they can win only when each rank has a core (or GPU) free.",
        {**_PIPELINE, "strategies": ["naive_mp", "gpipe", "1f1b"]},
        "Now the model itself is split, by layers: stages wait on each other, and "
        "micro-batches are how you keep them busy.",
        caveat="On a CPU host, each micro-batch costs every stage its operators' fixed "
               "overhead and a message handshake of a millisecond or more, which a small "
               "model's micro-batch may not outweigh; and where the ranks share fewer free "
               "cores than there are stages, the stages take turns instead of working at "
               "once. GPipe and 1F1B then need not beat naive model parallel here, though "
               "their bubble still shows: the card weighs that overhead against the bubble.",
        elsewhere=_PIPELINE_ON_GPUS[0], calculator=_PIPELINE_ON_GPUS[1],
    ),
    "tensor_parallel": Guide(
        "Each layer's weights split in half across two ranks and joined by all-reduces on "
        "every forward and backward, with the answer still matching one device.",
        {**_TINY, "world_size": 2},
        "Split inside each layer instead: no idle stages, but an all-reduce on the critical "
        "path of every layer, so it wants a fast link.",
    ),
    "zero": Guide(
        "Memory per rank falling as optimizer state, then gradients, then the parameters "
        "themselves are split across ranks; the bytes sent stay the same until the "
        "parameters are split too (then 1.5x).",
        {**_TINY, "world_size": 2},
        "Back to data parallel, but nothing is kept twice: memory traded for the same "
        "bytes, gathered when needed.",
    ),
    "gpt_mfu": Guide(
        "How many tokens per second one device trains, and what fraction of its peak "
        "compute that is (MFU).",
        {key: _TINY[key] for key in ("device", "steps", "warmup", "seq_len", "hidden",
                                     "layers", "heads", "vocab")},
    ),
    "recompute": Guide(
        "Activations thrown away after forward and rebuilt during backward: the step's peak "
        "memory falling below one device's, and the extra forward it costs in time.",
        {**_TINY, "world_size": 1},
        "Memory is not only weights: the activations kept for backward can be traded for "
        "compute, a whole block at a time or only the attention core.",
    ),
    "mesh": Guide(
        "Four ranks as a 2 × 2 grid: tensor parallelism between the two ranks of a node, "
        "data parallelism between the nodes — by hand and with PyTorch's DeviceMesh — and "
        "the bytes each dimension sends, over which kind of link.",
        {**_TINY, "world_size": 4},
        "Put together: each dimension gets its own process groups and the link it can "
        "afford — tensor parallelism inside a node, data parallelism across.",
    ),
    "experts": Guide(
        "Each MLP turned into four experts, two per rank: tokens sent to their expert's "
        "rank and back with all-to-alls, the tokens each expert got and those it dropped.",
        {**_TINY, "world_size": 2, "experts": 4, "capacity_factor": 1.0},
        "More parameters for the same compute: each token uses only its experts, and the "
        "experts live on different ranks, so tokens travel to them and back.",
    ),
    "sequence": Guide(
        "Tensor parallelism's LayerNorms cut along the sequence (all-gathers and "
        "reduce-scatters, the same bytes, less memory) and attention passed around a ring "
        "of ranks.",
        {**_TINY, "world_size": 2},
        "Long sequences: split the tokens, not only the weights, and pass keys and values "
        "around a ring so every rank still attends to every earlier token.",
    ),
}

# Data parallel first (the simplest split), then splitting the model by layers, then
# inside layers, then removing the copies data parallel keeps, then all of them at once.
START_HERE = ("data_parallel", "pipeline", "tensor_parallel", "zero", "mesh")
# After the path: what large runs add to the mesh - memory for compute, long sequences,
# experts spread over ranks.
GOING_FURTHER = ("recompute", "sequence", "experts")
# Not a step of the path: measuring the machine the predictions rest on.
THE_MACHINE = ("collectives", "gemm_roofline", "gpt_mfu")


def guide(name: str) -> Guide | None:
    return GUIDES.get(name)


def first_run(name: str) -> dict:
    """The suggested first run's parameters, resolved (defaults filled in) by the lab's own
    registry, so the form shows exactly what will run."""
    return registry.validate(name, GUIDES[name].first_run) if name in GUIDES else {}


def path(catalogue: list[dict]) -> list[dict]:
    """The start-here steps that the catalogue has, in order, with their guides."""
    present = {e["name"]: e for e in catalogue}
    return [{"step": i, "experiment": present[name], "guide": GUIDES[name]}
            for i, name in enumerate((n for n in START_HERE if n in present), start=1)]
