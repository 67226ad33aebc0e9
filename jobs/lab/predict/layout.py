"""Where every parameter of the lab's model lives under a strategy: the sharding view's data.

Plain arithmetic, no torch (the web app draws it). From a model description (the
``model`` of a result, or the registry's parameters), a strategy and a world size it
gives the model's blocks - the embedding, each transformer (or MLP) block, the final
norm and head - and for each parameter tensor, named and shaped as jobs/lab/components/model.py
makes it: the piece each rank owns, the elements each rank keeps in memory, and what is
communicated for it and when. The rules (jobs/lab/predict/placement.py) follow the strategies:

    single      rank 0 holds everything (the others wait)
    DP, DDP     every rank a full copy; gradients all-reduced (per tensor, or in the
                buckets of cost.plan_buckets)
    ZeRO-1/2    full parameters everywhere; rank r owns slice r of every flat, padded
                bucket (plan_buckets with pad_to=d): it reduce-scatters into it, updates it
                with its optimizer state, and the bucket is all-gathered back
    FSDP2       each tensor cut into d chunks of ceil(rows/d) rows (dim 0); one unit per
                block and the root; all-gathered around use, gradients reduce-scattered
    ZeRO-3      rank r keeps slice r of each flat, padded unit (zero3.units:
                embedding, blocks, head) and nothing else between uses (zero3.py)
    pipelines   blocks of cost.stage_layers on each stage, the embedding on the
                first, the head on the last; activations sent between stages
    interleaved the blocks in p*v chunks, chunk c on rank c % p (placement_interleaved.py)
    TP          q, k, v, fc split by output rows (column-parallel), both projections by
                input columns (row-parallel); the rest replicated (tp_split_params)
    SP, CP      TP's split, plus the sequence sharded (placement_sequence.py); ring attention
                replicates the weights and splits the tokens
    recompute   the single device's (or DP's) placement: recomputation moves no weights
The meshes (dp x pp x tp) and the experts have no view yet: a layout knows one degree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jobs.lab.predict import placement, placement_interleaved, placement_sequence, recompute, zero3
from jobs.lab.predict.placement import FLAT, Ctx, Model, Piece, nbytes

__all__ = ["FLAT", "LABELS", "Block", "Layout", "Model", "Piece", "Tensor", "layout", "nbytes"]

LABELS = {
    "single": "single device (reference)",
    "dp_naive": "data parallel, naive (all-reduce after backward)",
    "dp_bucket": "data parallel, bucketed + overlapped",
    "ddp": "torch DistributedDataParallel",
    "zero1": "ZeRO-1 by hand (optimizer state sharded)",
    "zero2": "ZeRO-2 by hand (optimizer state and gradients sharded)",
    "fsdp2": "torch FSDP2 fully_shard (ZeRO-3)",
    "zero3": "ZeRO-3 by hand (parameters, gradients and optimizer state sharded)",
    "naive_mp": "naive model parallel (one batch, no micro-batches)",
    "gpipe": "GPipe by hand (all forward, all backward)",
    "1f1b": "1F1B by hand (one forward, one backward)",
    "torch_gpipe": "torch.distributed.pipelining ScheduleGPipe",
    "torch_1f1b": "torch.distributed.pipelining Schedule1F1B",
    "interleaved_1f1b": "interleaved 1F1B by hand (v virtual stages per rank)",
    "torch_interleaved_1f1b": "torch.distributed.pipelining ScheduleInterleaved1F1B",
    "torch_zero_bubble": "torch.distributed.pipelining ScheduleInterleavedZeroBubble",
    "tp_megatron": "Megatron tensor parallel by hand (f/g operators)",
    "tp_dtensor": "torch DTensor ColwiseParallel/RowwiseParallel",
    "dp_tp": "DP x TP by hand (tp groups inside, dp groups across)",
    "dp_pp": "DP x PP by hand (1F1B stages, dp groups per stage)",
    "dp_pp_tp": "DP x PP x TP by hand (3D: tp inside a stage, stages, dp across)",
    "torch_dp_tp": "torch DeviceMesh 2-D: fully_shard on dp, parallelize_module on tp",
    "torch_dp_pp": "torch DeviceMesh 2-D: DDP on dp, pipelining Schedule1F1B on pp",
    "ep_alltoall": "expert parallel by hand (all-to-all dispatch and combine)",
    "recompute_full": "full recomputation by hand (block input kept)",
    "recompute_selective": "selective recomputation by hand (attention core rerun)",
    "torch_checkpoint_full": "torch.utils.checkpoint per block (full)",
    "torch_checkpoint_selective": "torch.utils.checkpoint on the attention core (selective)",
    "tp_sequence": "Megatron sequence parallel by hand (all-gather / reduce-scatter)",
    "torch_tp_sequence": "torch DTensor SequenceParallel + Colwise/RowwiseParallel (Shard(1))",
    "cp_ring": "context parallel by hand (ring attention, load-balanced causal chunks)",
}
RULES = {"single": placement.single, "fsdp2": placement.fsdp2, "zero3": zero3.zero3,
         **dict.fromkeys(("dp_naive", "dp_bucket", "ddp"), placement.data_parallel),
         **dict.fromkeys(("zero1", "zero2"), placement.zero),
         **dict.fromkeys(("naive_mp", "gpipe", "1f1b", "torch_gpipe", "torch_1f1b"),
                         placement.pipeline),
         **dict.fromkeys(("tp_megatron", "tp_dtensor"), placement.tensor_parallel),
         **dict.fromkeys(("recompute_full", "recompute_selective", "torch_checkpoint_full",
                          "torch_checkpoint_selective"), recompute.placement_rule),
         **dict.fromkeys(("tp_sequence", "torch_tp_sequence"),
                         placement_sequence.sequence_parallel),
         "cp_ring": placement_sequence.context_parallel,
         **dict.fromkeys(placement_interleaved.SCHEDULES, placement_interleaved.interleaved)}


@dataclass(frozen=True)
class Tensor:
    name: str  # as model.named_parameters() names it
    shape: tuple[int, ...]
    split: str  # whole (one rank), replicated, stage, column, row, flat, dim0
    pieces: tuple[Piece, ...]  # who owns what (ZeRO: the ranges each rank updates)
    held: tuple[int, ...]  # elements of the parameter each rank keeps in memory
    comm: tuple[str, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def owners(self) -> tuple[int, ...]:
        return tuple(p.rank for p in self.pieces if p.numel)

    @property
    def short(self) -> str:
        """The name inside its block: "attn.q.weight" for "blocks.3.attn.q.weight"."""
        return self.name.split(".", 2)[2] if self.name.startswith("blocks.") else self.name


@dataclass(frozen=True)
class Block:
    key: str  # embed, block, finish
    index: int | None  # the layer of a block
    label: str
    tensors: tuple[Tensor, ...]
    comm: tuple[str, ...] = ()  # the block's own traffic: activations, f/g
    note: str = ""


@dataclass(frozen=True)
class Layout:
    strategy: str
    label: str
    world: int
    model: Model
    e: int  # bytes per element of the parameters as held
    blocks: tuple[Block, ...]
    summary: tuple[str, ...]

    def held_elements(self) -> list[int]:
        return [sum(t.held[r] for b in self.blocks for t in b.tensors)
                for r in range(self.world)]

    def held_bytes(self) -> list[int]:
        return [n * self.e for n in self.held_elements()]

    def owned_elements(self) -> list[int]:
        return [sum(p.numel for b in self.blocks for t in b.tensors for p in t.pieces
                    if p.rank == r) for r in range(self.world)]


def layout(model: Model | dict, strategy: str, world: int, *, micro_batches: int = 1,
           bucket_cap_mb: float = 0.25, batch_size: int = 8,
           virtual_stages: int = 1) -> Layout:
    """The layout of `model` under `strategy` on `world` ranks; ValueError when the
    strategy cannot lay that model out (TP of the MLP stack, fewer layers than stages)."""
    m = model if isinstance(model, Model) else Model.of(model)
    if strategy not in RULES:
        raise ValueError(f"unknown strategy {strategy!r}")
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world <= 64:
        raise ValueError(f"world size must be 1 to 64, got {world!r}")
    for name, value in (("micro_batches", micro_batches), ("batch_size", batch_size),
                        ("bucket_cap_mb", bucket_cap_mb), ("virtual_stages", virtual_stages)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value < 2**31:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    ctx = Ctx(m, world, int(micro_batches), float(bucket_cap_mb), int(batch_size),
              int(virtual_stages))
    rule, summary, block_comm = RULES[strategy](ctx, strategy)
    groups: dict[tuple, list[Tensor]] = {}
    for i, (key, layer, name, shape) in enumerate(m.tensors()):
        split, pieces, held, comm = rule(i, key, layer, name, shape)
        groups.setdefault((key, layer), []).append(
            Tensor(name, shape, split, tuple(pieces), tuple(held), tuple(comm)))
    blocks = tuple(Block(key, layer, _block_label(m, key, layer), tuple(tensors),
                         tuple(block_comm.get((key, layer), ())), _note(m, key))
                   for (key, layer), tensors in groups.items())
    e = 4 if strategy == "fsdp2" else m.e  # FSDP2 keeps fp32 sharded (master) weights
    return Layout(strategy, LABELS[strategy], world, m, e, blocks, tuple(summary))


def _block_label(m: Model, key: str, layer: int | None) -> str:
    if key == "block":
        return f"block {layer}"
    if key == "embed":
        return "embedding" if m.kind == "gpt" else "input projection"
    return "final norm and head" if m.kind == "gpt" else "output projection"


def _note(m: Model, key: str) -> str:
    if key == "finish" and m.kind == "gpt" and m.tie_head:
        return "The head is tied to wte.weight: it has no parameters of its own."
    return ""
