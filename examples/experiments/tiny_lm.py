"""A tiny causal transformer trained with DDP on synthetic text: the shape of the loop you
would measure yourself, small enough to finish in seconds on a CPU (gloo) and to run
unchanged on GPUs (nccl) with device=cuda. docs/EXPERIMENTS.md walks through it.

Copy this file into the folder named by COMMONPLACE_EXPERIMENTS on the runner host and
restart the runner (or let it notice): the experiment appears in the catalogue.
"""

import statistics
import time

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# Read without running this file (a literal: no names, no calls). Parameters use the
# catalogue's types: int, float, str, bool, str_list, with min/max/choices and a default.
EXPERIMENT = {
    "name": "tiny_lm",
    "title": "Tiny language model: DDP training loop",
    "description": (
        "A small causal transformer learns a synthetic sequence (each token is the one "
        "before plus one) with DistributedDataParallel across the ranks. Reports the loss "
        "per step, the time of each step, tokens per second and each rank's step time."
    ),
    "params": {
        "world_size": {"type": "int", "default": 2, "min": 1, "max": 8,
                       "description": "Ranks (one GPU each on CUDA)."},
        "device": {"type": "str", "default": "auto", "choices": ["auto", "cpu", "cuda"],
                   "description": "cpu (gloo), cuda (nccl) or auto."},
        "steps": {"type": "int", "default": 20, "min": 1, "max": 10000,
                  "description": "Timed optimizer steps."},
        "warmup": {"type": "int", "default": 3, "min": 0, "max": 100,
                   "description": "Untimed steps first (allocations, kernel choice)."},
        "batch_per_rank": {"type": "int", "default": 8, "min": 1, "max": 1024,
                           "description": "Sequences per rank per step."},
        "seq_len": {"type": "int", "default": 32, "min": 4, "max": 4096,
                    "description": "Tokens per sequence."},
        "heads": {"type": "int", "default": 2, "min": 1, "max": 64,
                  "description": "Attention heads (width = heads x head_dim)."},
        "head_dim": {"type": "int", "default": 32, "min": 8, "max": 256,
                     "description": "Width of one head."},
        "layers": {"type": "int", "default": 2, "min": 1, "max": 48,
                   "description": "Transformer blocks."},
        "vocab": {"type": "int", "default": 128, "min": 8, "max": 65536,
                  "description": "Vocabulary size."},
        "lr": {"type": "float", "default": 0.003, "min": 1e-06, "max": 1.0,
               "description": "AdamW learning rate."},
        "dtype": {"type": "str", "default": "float32", "choices": ["float32", "bfloat16"],
                  "description": "Compute dtype (bfloat16 by autocast, CUDA only)."},
        "seed": {"type": "int", "default": 0, "min": 0, "max": 2147483647,
                 "description": "Seed of weights and data."},
    },
    "reports": {
        "scalars": {
            "first_loss": "Loss at the first timed step.",
            "final_loss": {"description": "Loss at the last step.", "better": "lower"},
            # "spread": the per-step series whose p10-p90 is this number's noise (trends)
            "step_time_median": {"description": "Median time of a timed step.", "unit": "s",
                                 "better": "lower", "spread": "step_time"},
            "tokens_per_s": {"description": "Tokens of all ranks per second, at the median "
                             "step.", "unit": "tokens/s", "better": "higher",
                             "spread": "step_time"},
            "parameters": "Parameters of the model.",
        },
        "series": {
            "loss": "Training loss at every step (rank 0's batch).",
            "step_time": {"description": "Time of each timed step.", "unit": "s"},
        },
        "tables": {"ranks": "Each rank's device and median step time."},
    },
}


class TinyLM(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, seq_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(seq_len, width))
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(seq_len))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position  # (B, T, width)
        x = self.blocks(x, mask=self.causal, is_causal=True)
        return self.head(x)  # (B, T, vocab)


def batches(steps: int, batch: int, seq_len: int, vocab: int, seed: int,
            device: torch.device) -> torch.Tensor:
    """Every step's batch, made up front on the device: (steps, B, T + 1) token ids whose
    next token is the last plus one, from a random start per sequence."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (steps, batch, 1), generator=g)
    return ((start + torch.arange(seq_len + 1)) % vocab).to(device)


def run(lab, params):
    p = params
    torch.manual_seed(p["seed"])  # the same weights on every rank (DDP checks it)
    model = TinyLM(p["vocab"], p["heads"] * p["head_dim"], p["heads"], p["layers"],
                   p["seq_len"]).to(lab.device)
    ddp = DDP(model, device_ids=[lab.device] if lab.is_cuda else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=p["lr"])
    total = p["warmup"] + p["steps"]
    data = batches(total, p["batch_per_rank"], p["seq_len"], p["vocab"],
                   p["seed"] * 1000 + lab.rank, lab.device)
    autocast = torch.autocast("cuda", torch.bfloat16,
                              enabled=lab.is_cuda and p["dtype"] == "bfloat16")
    losses = torch.zeros(total, device=lab.device)  # kept on the device: no sync per step
    marks = []  # per timed step: CUDA events, or wall times on the CPU (already in step)

    for step in range(total):
        timed = step >= p["warmup"]
        if timed:
            marks.append(_mark(lab))
        tokens = data[step]
        with autocast:
            logits = ddp(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                               tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here, bucket by bucket
        opt.step()
        losses[step] = loss.detach()
        if timed:
            marks[-1] = (marks[-1], _mark(lab))
        if (step + 1) % 5 == 0 or step + 1 == total:  # (rank 0's line; the others' are dropped)
            lab.progress(step + 1, total)

    lab.sync()  # the one wait for the device, after the timed loop
    times = [_seconds(a, b) for a, b in marks]
    loss_values = losses.tolist()
    median = statistics.median(times)
    tokens_per_step = p["batch_per_rank"] * p["seq_len"] * lab.world_size
    for step, value in enumerate(loss_values):
        lab.series("loss", step, value)
    for i, seconds in enumerate(times):
        lab.series("step_time", p["warmup"] + i, seconds)
    lab.scalar("first_loss", loss_values[p["warmup"]])
    lab.scalar("final_loss", loss_values[-1])
    lab.scalar("step_time_median", median)
    lab.scalar("tokens_per_s", tokens_per_step / median)
    lab.scalar("parameters", sum(t.numel() for t in model.parameters()))
    per_rank = lab.gather((lab.rank, str(lab.device), median))
    lab.table("ranks", ["rank", "device", "median step (s)"], [list(r) for r in per_rank])
    lab.log(f"loss {loss_values[0]:.3f} -> {loss_values[-1]:.3f}, "
            f"{tokens_per_step / median:,.0f} tokens/s")


def _mark(lab):
    """A point in time on the device's clock: a recorded CUDA event (no wait), or the
    wall clock on a CPU, where every operation has already finished when it returns."""
    if lab.is_cuda:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def _seconds(start, end) -> float:
    if isinstance(start, float):
        return end - start
    return start.elapsed_time(end) / 1000.0  # milliseconds; both events have completed
