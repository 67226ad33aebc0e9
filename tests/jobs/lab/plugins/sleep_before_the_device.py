"""Each rank writes its PID and its parent's, then sleeps before it looks for a device: the
ranks of a device=cuda run stay alive on a host without one, started as on a GPU host (by
the forkserver). Loaded into the workers through COMMONPLACE_LAB_PLUGIN."""

import json
import os
import time

with open(os.path.join(os.environ["RANK_PIDS_DIR"], f"rank{os.environ['RANK']}.json"), "w") as fh:
    json.dump({"pid": os.getpid(), "parent": os.getppid()}, fh)
time.sleep(3600)
