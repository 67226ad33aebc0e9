"""Fixtures the lab's in-process tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_rank(tmp_path):
    """A real one-rank gloo group and the context a rank of a run gets."""
    # torch is imported here, not at the top: every xdist worker loads this conftest to
    # collect the suite, and most of the lab's modules start runs in other processes.
    import torch
    import torch.distributed as dist

    from jobs.lab.components.context import Context
    from jobs.lab.components.instrument import Comm, Timeline

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1),
                            rank=0, world_size=1)
    tl, group, cpu = Timeline(0), dist.group.WORLD, torch.device("cpu")
    try:
        yield Context(0, 1, cpu, "gloo", tl, Comm(tl, group, cpu), out_dir=str(tmp_path),
                      group=group, cpu_group=group)
    finally:
        dist.destroy_process_group()
