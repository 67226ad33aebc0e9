"""Activation recomputation with PyTorch's own torch.utils.checkpoint (non-reentrant).

``checkpoint(fn, *args, use_reentrant=False)`` runs fn under saved-tensor hooks that
keep nothing but a handle; the first time backward unpacks one of them, fn runs again
(only up to the last tensor backward needs: early stop) and the rebuilt tensors are
handed to the original graph's nodes - no nested backward, unlike recompute.py's.

- full: each transformer (or MLP) block, the module itself, checkpointed;
- selective: only the attention core (SDPA on q, k, v) checkpointed, as Megatron-LM
  checkpoints its core attention - not create_selective_checkpoint_contexts: a
  save/recompute policy over the block's operators would keep the outputs of every
  operator it saves, not only what autograd keeps, and so differ from Megatron's policy.

The model has no dropout: preserve_rng_state is off, as recompute.py keeps no RNG state
(``has_dropout``). Data parallel over the ranks as recompute.py.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from jobs.lab.strategies.recompute import RecomputeFull, attention_core, block_forward


class TorchCheckpointFull(RecomputeFull):
    name = "torch_checkpoint_full"
    label = "torch.utils.checkpoint per block (full)"
    builtin = True
    rebuilt_output = False  # early stop: the block's last operator is not rerun

    def block(self, blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(blk, x, use_reentrant=False, preserve_rng_state=self.preserve_rng)


class TorchCheckpointSelective(RecomputeFull):
    name = "torch_checkpoint_selective"
    label = "torch.utils.checkpoint on the attention core (selective)"
    builtin = True
    policy = "selective"
    rebuilt_output = False

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return checkpoint(attention_core, q, k, v, use_reentrant=False,
                          preserve_rng_state=self.preserve_rng)

    def block(self, blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return block_forward(blk, x, self.core)
