"""The first module the forkserver of a CUDA run imports (elastic.py's preload): it makes the
forkserver die with the agent that started it, as a rank dies with its parent
(worker.die_with_parent). SIGKILL of the launcher kills the agent (launch.py), which now
kills the forkserver, which kills its ranks; without this the forkserver and its ranks
outlived a killed agent, holding their GPUs (tests/jobs/lab/test_lab_elastic.py)."""

from jobs.lab.launcher.worker import die_with_parent

die_with_parent()
