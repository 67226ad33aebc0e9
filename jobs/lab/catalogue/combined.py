"""The catalogue's experiments that combine strategies the way large models are trained:
meshes of data, pipeline and tensor parallelism, activation recomputation, sequence and
context parallelism, experts spread over ranks. Plain data, as in schemas.py."""

from __future__ import annotations

from typing import Any

from jobs.lab.catalogue.schemas import RESULT_TRAINING, p, params

_TRAINING = ("steps", "warmup", "batch_size", "seq_len", "hidden", "layers", "heads", "vocab",
             "device", "seed", "gate_tolerance", "precision")

EXPERIMENTS: dict[str, dict[str, Any]] = {
    "mesh": {
        "title": "Meshes: DP×TP, DP×PP and DP×PP×TP, by hand and with DeviceMesh",
        "description": (
            "The ranks form a grid: tensor parallelism inside a node (its all-reduces are on "
            "the critical path and want the fastest link), pipeline stages across nodes "
            "(point-to-point, small), data parallelism over what is left (one gradient "
            "all-reduce per step, overlapped). Each dimension has its own process groups; "
            "world = dp x pp x tp, rank = ((dp_idx x pp) + pp_idx) x tp + tp_idx (tp "
            "innermost). By hand (Megatron f/g, 1F1B stages, bucketed all-reduce over each "
            "dimension's groups), and with PyTorch's DeviceMesh, fully_shard, "
            "parallelize_module, DDP and pipelining's Schedule1F1B. Bytes are predicted per "
            "dimension and per link kind."
        ),
        "params": params(
            *_TRAINING,
            world_size=p("int", 4, "Ranks: dp x pp x tp.", min=2, max=8),
            tp=p("int", 2, "Tensor-parallel degree t (innermost, within a node).",
                 min=1, max=8),
            pp=p("int", 2, "Pipeline stages p of the strategies with a pipeline.",
                 min=1, max=8),
            micro_batches=p("int", 2, "Micro-batches m per optimizer step (pipelines).",
                            min=1, max=64),
            ranks_per_node=p("int", 2, "Ranks per node, for the link kinds: the tp "
                             "dimension's peers share a node when tp divides it.",
                             min=1, max=8),
            strategies=p("str_list", ["dp_tp", "torch_dp_tp"], "Strategies to check and time.",
                         choices=["single", "dp_tp", "dp_pp", "dp_pp_tp", "torch_dp_tp",
                                  "torch_dp_pp"]),
        ),
        "min_world_size": 2,
        "result": RESULT_TRAINING + " Meshes add the degrees, and bytes per dimension and per "
                                    "link kind (intra-node, inter-node).",
    },
    "recompute": {
        "title": "Activation recomputation: full and selective, by hand and with checkpoint",
        "description": (
            "Backward needs forward's activations. Full recomputation keeps only each "
            "block's input (2*s*b*h bytes in bf16, instead of ~16 elements of s*b*h here) "
            "and runs the block's forward again during backward: about a third more "
            "compute. Selective recomputation (Megatron) reruns only the attention core, "
            "whose memory grows with s^2 - but this model's core is a fused SDPA kernel that "
            "keeps no s^2 matrix (FlashAttention already recomputes it), so selective saves "
            "only the kernel's log-sum-exp: little memory, little time. By hand (an "
            "autograd.Function) and with torch.utils.checkpoint (non-reentrant: per block, "
            "and on the attention core). Selective needs the GPT model; more than one rank "
            "runs data parallel (gradients all-reduced per tensor)."
        ),
        "params": params(
            *_TRAINING, "model",
            world_size=p("int", 1, "Ranks (data parallel when more than one).", min=1, max=8),
            strategies=p("str_list", ["single", "recompute_full", "recompute_selective",
                                      "torch_checkpoint_full", "torch_checkpoint_selective"],
                         "Strategies to check and time.",
                         choices=["single", "recompute_full", "recompute_selective",
                                  "torch_checkpoint_full", "torch_checkpoint_selective"]),
        ),
        "min_world_size": 1,
        "result": RESULT_TRAINING + " Recomputation adds, beside single (world_size 1), "
                                    "the activation and peak bytes saved and the step time "
                                    "added, measured vs predicted.",
    },
    "sequence": {
        "title": "Sequence and context parallelism: Megatron-SP and ring attention",
        "description": (
            "Tensor parallelism leaves LayerNorm and dropout replicated on every rank. "
            "Megatron's sequence parallelism shards them on the sequence instead and turns "
            "each all-reduce into an all-gather before the block and a reduce-scatter after: "
            "the same bytes, activations divided by t. Context parallelism splits the "
            "sequence itself over ranks; attention passes the key/value blocks around a ring "
            "(ring attention), each rank combining partial softmaxes with their "
            "log-sum-exps; causal chunks are dealt out two to a rank (one early, one late) "
            "so that every rank does the same work."
        ),
        "params": params(
            *_TRAINING,
            world_size=p("int", 2, "Ranks: the tensor/sequence/context-parallel degree.",
                         min=1, max=8),
            strategies=p("str_list", ["tp_megatron", "tp_sequence", "torch_tp_sequence",
                                      "cp_ring"],
                         "Strategies to check and time.",
                         choices=["single", "tp_megatron", "tp_sequence", "torch_tp_sequence",
                                  "cp_ring"]),
        ),
        "min_world_size": 1,
        "result": RESULT_TRAINING + " Sequence parallelism's bytes are per collective kind "
                                    "(all-gather, reduce-scatter, the LayerNorm gradients' "
                                    "all-reduce), ring attention's per send and receive.",
    },
    "experts": {
        "title": "Expert parallelism: a mixture-of-experts layer with all-to-all",
        "description": (
            "Every block's MLP becomes E experts (each the dense MLP's shape) and a router "
            "that sends each token to its top-k; an expert takes at most C = "
            "ceil(capacity_factor*k*s/E) of a sequence's tokens, the rest are dropped (the "
            "residual carries them). Expert parallelism gives each rank E/d experts and "
            "1/d of the batch: tokens travel to their expert's rank in a static capacity "
            "buffer with an all-to-all (dispatch) and back with another (combine), 4L "
            "all-to-alls of E*b*C*h*e bytes a step with backward's; the rest is data "
            "parallel. The load per expert shows how evenly the router spreads the tokens, "
            "and the dense GPT of the same active FLOPs is timed beside it."
        ),
        "params": params(
            *_TRAINING,
            world_size=p("int", 2, "Ranks; the experts are split evenly over them.",
                         min=1, max=8),
            experts=p("int", 4, "Experts E per MoE layer (a multiple of world_size).",
                      min=1, max=64),
            top_k=p("int", 1, "Experts each token is routed to.", min=1, max=2),
            capacity_factor=p("float", 2.0, "Slots an expert has per sequence, as a "
                              "multiple of its even share k*s/E (tokens past them are "
                              "dropped, as in Switch).", min=0.25, max=16.0),
            strategies=p("str_list", ["single", "ep_alltoall"],
                         "Strategies to check and time (ep_alltoall also times the dense "
                         "GPT of the same active FLOPs beside it).",
                         choices=["single", "ep_alltoall"]),
        ),
        "min_world_size": 1,
        "result": RESULT_TRAINING + " Expert parallelism adds, per layer, the tokens routed "
                                    "to each expert, those kept and dropped, the all-to-"
                                    "all bytes, and the dense baseline's step time.",
    },
}
