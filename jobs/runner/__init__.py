"""The runner agent: pulls runs from a Commonplace server and executes them with the lab.

    commonplace runner --server https://notes.tail1234.ts.net --token cp_…

It opens every connection itself (no inbound port on the GPU host): register, then a
loop of long-poll leases. A leased run is launched as `python -m jobs.lab run …` in its
own process group; this process — never the training processes — heartbeats the lease,
streams the log in sequenced chunks, uploads the result, and reports how the run ended
(as the lab's launcher classified it: the agent forwards, it does not judge).

If the server cannot be reached the run carries on: output is spooled to disk and sent
when the server answers again. If the server says our lease is stale (409: the run was
declared LOST, or leased again), the job is killed at once — two copies of one run must
never both report. Cancel arrives in a heartbeat reply: SIGTERM to the group, a grace
period, SIGKILL.

    client.py  the HTTP client and its three failures (Stale, Unreachable, Refused)
    agent.py   the lease loop, one run, its logs and its report
    host.py    host labels, and the job's process group
    waiting.py how a silent server is waited for: quietly, then named once

Stdlib only, apart from base (the lab's contract, the run statuses): no torch here (the
lab runs in the child), and nothing of app/.
"""

from jobs.runner.agent import main

__all__ = ["main"]
