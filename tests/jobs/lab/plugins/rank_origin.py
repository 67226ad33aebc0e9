"""Each rank writes where it came from: its parent, what was loaded before it ran,
whether SIGTERM would end it as it ends a new Python, and the address it was given for
the agent's store."""

import json
import os
import signal
import sys

with open(os.path.join(os.environ["RANK_ORIGIN_DIR"], f"rank{os.environ['RANK']}.json"), "w") as fh:
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as parent:
        parent_cmdline = parent.read().replace(b"\0", b" ").decode()
    json.dump({"parent": os.getppid(), "parent_cmdline": parent_cmdline,
               "modules": sorted(sys.modules),
               "nvml_check": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
               "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
               "master_addr": os.environ.get("MASTER_ADDR")}, fh)
