"""One file per parallelism strategy, hand-written beside PyTorch's own.

``STRATEGIES`` maps a strategy name (as used in the ``strategies`` parameter) to
"module:Class"; :func:`get` imports lazily so a run only loads what it uses. A test
plugin (COMMONPLACE_LAB_PLUGIN) may register a replacement under an existing name.
"""

from __future__ import annotations

import importlib

STRATEGIES: dict[str, str] = {
    "single": "jobs.lab.strategies.single:SingleDevice",
    "dp_naive": "jobs.lab.strategies.data_parallel:DataParallelNaive",
    "dp_bucket": "jobs.lab.strategies.data_parallel:DataParallelBucket",
    "ddp": "jobs.lab.strategies.ddp:TorchDDP",
    "naive_mp": "jobs.lab.strategies.pipeline_parallel:NaiveModelParallel",
    "gpipe": "jobs.lab.strategies.pipeline_parallel:GPipe",
    "1f1b": "jobs.lab.strategies.pipeline_parallel:OneFOneB",
    "torch_gpipe": "jobs.lab.strategies.torch_pipelining:TorchGPipe",
    "torch_1f1b": "jobs.lab.strategies.torch_pipelining:Torch1F1B",
    "tp_megatron": "jobs.lab.strategies.tensor_parallel:MegatronTP",
    "tp_dtensor": "jobs.lab.strategies.dtensor_tp:DTensorTP",
    "zero1": "jobs.lab.strategies.zero:Zero1",
    "zero2": "jobs.lab.strategies.zero:Zero2",
    "fsdp2": "jobs.lab.strategies.fsdp:TorchFSDP2",
    # the combined and newer strategies: each helper owns its own lines below
    "zero3": "jobs.lab.strategies.zero3:Zero3",
    "interleaved_1f1b": "jobs.lab.strategies.interleaved:Interleaved1F1B",
    "torch_interleaved_1f1b": "jobs.lab.strategies.torch_schedules:TorchInterleaved1F1B",
    "torch_zero_bubble": "jobs.lab.strategies.torch_schedules:TorchZeroBubble",
    "dp_tp": "jobs.lab.strategies.mesh:DataTensor",
    "dp_pp": "jobs.lab.strategies.mesh:DataPipeline",
    "dp_pp_tp": "jobs.lab.strategies.mesh:DataPipelineTensor",
    "torch_dp_tp": "jobs.lab.strategies.torch_mesh:TorchDataTensor",
    "torch_dp_pp": "jobs.lab.strategies.torch_mesh:TorchDataPipeline",
    "recompute_full": "jobs.lab.strategies.recompute:RecomputeFull",
    "recompute_selective": "jobs.lab.strategies.recompute:RecomputeSelective",
    "torch_checkpoint_full": "jobs.lab.strategies.torch_checkpoint:TorchCheckpointFull",
    "torch_checkpoint_selective": "jobs.lab.strategies.torch_checkpoint:TorchCheckpointSelective",
    "tp_sequence": "jobs.lab.strategies.sequence_parallel:MegatronSP",
    "torch_tp_sequence": "jobs.lab.strategies.sequence_parallel:TorchSequenceParallel",
    "cp_ring": "jobs.lab.strategies.context_parallel:RingAttention",
    "ep_alltoall": "jobs.lab.strategies.experts:ExpertParallel",
}

_overrides: dict[str, type] = {}


def register(name: str, cls: type) -> None:
    """Replace the class behind a strategy name (used by test plugins)."""
    _overrides[name] = cls


def get(name: str) -> type:
    if name in _overrides:
        return _overrides[name]
    module, _, attr = STRATEGIES[name].partition(":")
    return getattr(importlib.import_module(module), attr)
