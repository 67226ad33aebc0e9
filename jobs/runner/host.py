"""The GPU host as the agent sees it: what it offers (labels for leases) and its
processes (the job's process group, which must not outlive the agent)."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import signal
import socket
import subprocess


def host_labels() -> dict:
    """What this host offers: runs that need GPUs only come to a runner that has them."""
    labels = {"host": socket.gethostname()[:60], "cpu_count": os.cpu_count() or 1,
              "platform": platform.machine(), "gpu_count": 0}
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout
            names = [line.strip() for line in out.splitlines() if line.strip()]
            labels.update(gpu_count=len(names), gpu_model=names[0][:60] if names else "")
        except (OSError, subprocess.SubprocessError):
            pass
    return labels


def die_with_parent() -> None:
    """In the child: if the agent dies (kill -9 included), the kernel sends SIGTERM, and
    the lab launcher then ends its torchrun group. A run nobody watches is a LOST run
    that would only burn the GPU."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
