"""Runs that span hosts: a run with `nodes: N` is leased by N runners together, all or
nothing, and each of them launches its share of the ranks (torchrun --nnodes N
--node-rank k, rendezvous at node 0's address).

    JOINED ──(the N-th runner joins)──▶ LEASED ──(handed to its runner)──▶ STARTED ──▶ DONE
      └──(the gang's deadline passes first)──▶ RELEASED (the run stays QUEUED)

A runner idle on its long poll joins a queued gang run (its run_node row, JOINED) and
waits there; the run stays QUEUED. When the N-th runner joins, the run becomes LEASED
for all of them at once (one epoch), each node gets a lease of its own, and node 0's
address and rendezvous port become everyone's endpoint. If the gang is not full by its
deadline (`GANG_WAIT_S` from the first join) the partial claim is released: the runners
go back to other work, and for half a deadline do not join that run again (so a lone
runner does not sit on it for ever, and one that comes back finds the others waiting).

Once leased, every node heartbeats its own lease; the run's lease is the earliest of
them, so the reaper makes the run LOST as soon as any node falls silent, and the other
nodes learn it at their next heartbeat (409: they kill their process groups). A node
that fails ends the run FAILED at once, naming the node; the run SUCCEEDS when every
node has finished well and node 0 has sent rank 0's result.

This module keeps the run_node rows and decides; app/journal/runs.py makes the
transitions (it is the only writer of run_event).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Invalid, LogGap
from app.journal import run_files
from app.models import Run, Runner, RunNode, utcnow
from base import statuses

# A node's own statuses (run_node.status); the run's are base.statuses.
JOINED, LEASED, STARTED, DONE, RELEASED = "JOINED", "LEASED", "STARTED", "DONE", "RELEASED"
HOLDING = (LEASED, STARTED)  # a node that holds its share of a leased run
MAX_NODES = 16


def check_nodes(nodes, experiment: str, params: dict) -> int:
    """How many hosts a run asks for (1 unless it says): whole, 1 to MAX_NODES, and each
    host runs the same number of ranks (world_size / nodes); else Invalid naming nodes."""
    if nodes is None:
        return 1
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise Invalid(f"nodes is a whole number of hosts from 1 to {MAX_NODES}", "nodes")
    world = params.get("world_size")
    if nodes > 1 and not isinstance(world, int):
        raise Invalid(f"{experiment} runs on one host: nodes must be 1", "nodes")
    if nodes > 1 and world % nodes:
        raise Invalid(f"world_size {world} does not split evenly over {nodes} nodes "
                      "(each node runs world_size / nodes ranks)", "nodes")
    return nodes


def check_offer(node) -> dict | None:
    """What a runner offers in its lease call to join a gang: the address the other nodes
    reach it at, and a free rendezvous port on it. None: it cannot join gangs."""
    if node is None:
        return None
    if not isinstance(node, dict) or set(node) - {"address", "port"}:
        raise Invalid("node is {address, port}", "node")
    address, port = node.get("address"), node.get("port")
    if not isinstance(address, str) or not 0 < len(address) <= 100 or any(
            c.isspace() or c in "/[]" for c in address):
        raise Invalid("node.address is the IP address or host name other nodes reach", "node")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise Invalid("node.port is a TCP port from 1 to 65535", "node")
    return {"address": address, "port": port}


def nodes_of(session: Session, run: Run, *statuses: str) -> list[RunNode]:
    query = sa.select(RunNode).where(RunNode.run_id == run.id)
    if statuses:
        query = query.where(RunNode.status.in_(statuses))
    return list(session.scalars(query.order_by(RunNode.node_rank)))


def member(session: Session, run: Run, runner: Runner) -> RunNode | None:
    """This runner's node of a leased gang run, if it still holds it."""
    return session.scalar(sa.select(RunNode).where(
        RunNode.run_id == run.id, RunNode.runner_id == runner.id, RunNode.status.in_(HOLDING)))


# -- forming the gang ---------------------------------------------------------------------


def release_expired(session: Session, cooldown_s: float, now: dt.datetime | None = None) -> list:
    """Partial claims past their deadline let go: the runs stay QUEUED, and each runner
    keeps away from the run it waited on for `cooldown_s` (then the row is gone)."""
    now = now or utcnow()
    session.execute(sa.delete(RunNode).where(RunNode.status == RELEASED,
                                             RunNode.lease_expires_at < now))
    late = list(session.scalars(sa.select(RunNode).where(RunNode.status == JOINED,
                                                         RunNode.lease_expires_at < now)))
    for node in late:
        node.status = RELEASED
        node.lease_expires_at = now + dt.timedelta(seconds=cooldown_s)
    return sorted({node.run_id for node in late})


def waiting(session: Session, runner: Runner) -> RunNode | None:
    """The gang this runner has joined (JOINED, run still queued) or that has just formed
    and is not yet handed to it (LEASED); such a runner takes no other work."""
    return session.scalar(
        sa.select(RunNode).join(Run, Run.id == RunNode.run_id)
        .where(RunNode.runner_id == runner.id,
               sa.or_(sa.and_(RunNode.status == JOINED, Run.status == statuses.QUEUED),
                      sa.and_(RunNode.status == LEASED, Run.status.in_(statuses.ACTIVE))))
        .order_by(RunNode.id).limit(1))


def may_join(session: Session, run: Run, runner: Runner) -> bool:
    """Not already in this gang in any way (joined, or cooling off after a release)."""
    return session.scalar(sa.select(RunNode.id).where(
        RunNode.run_id == run.id, RunNode.runner_id == runner.id)) is None


def join(session: Session, run: Run, runner: Runner, offer: dict, wait_s: float,
         now: dt.datetime | None = None) -> list[RunNode]:
    """Add this runner to the run's forming gang (node rank: the order of joining, so the
    first runner hosts the rendezvous). Returns the gang's members so far."""
    now = now or utcnow()
    joined = nodes_of(session, run, JOINED)
    deadline = joined[0].lease_expires_at if joined else now + dt.timedelta(seconds=wait_s)
    node = RunNode(run_id=run.id, runner_id=runner.id, node_rank=len(joined), status=JOINED,
                   address=offer["address"], port=offer["port"], lease_expires_at=deadline,
                   joined_at=now, log_size=0)
    session.add(node)
    session.flush()
    return [*joined, node]


def form(gang: list[RunNode], ttl_s: float, now: dt.datetime | None = None) -> None:
    """The gang is full: every node holds a lease of its own from now."""
    until = (now or utcnow()) + dt.timedelta(seconds=ttl_s)
    for node in gang:
        node.status, node.lease_expires_at = LEASED, until


def spec(session: Session, run: Run, node: RunNode) -> dict:
    """What a node needs to launch its share: torchrun --nnodes --node-rank, and the
    rendezvous endpoint (node 0's address and port)."""
    first = nodes_of(session, run, *HOLDING, DONE)[0]
    host = f"[{first.address}]" if ":" in first.address else first.address
    return {"nodes": run.nodes, "node_rank": node.node_rank,
            "endpoint": f"{host}:{first.port}", "rdzv_id": f"run-{run.id}-{run.lease_epoch}"}


# -- while it runs ------------------------------------------------------------------------


def renew(session: Session, run: Run, node: RunNode, ttl_s: float) -> None:
    """A node's heartbeat: its own lease, and the run's (the earliest of its nodes')."""
    node.lease_expires_at = utcnow() + dt.timedelta(seconds=ttl_s)
    session.flush()
    run.lease_expires_at = earliest(session, run)


def earliest(session: Session, run: Run) -> dt.datetime | None:
    return session.scalar(sa.select(sa.func.min(RunNode.lease_expires_at)).where(
        RunNode.run_id == run.id, RunNode.status.in_(HOLDING)))


def silent(session: Session, run: Run, now: dt.datetime) -> str:
    """Which nodes' leases ran out, in words: "node 1 (runner b)"."""
    late = [n for n in nodes_of(session, run, *HOLDING)
            if n.lease_expires_at is not None and n.lease_expires_at < now]
    return ", ".join(f"node {n.node_rank} ({n.runner.name})" for n in late) or "a node"


def append_log(data_dir, session: Session, run: Run, node: RunNode, offset, data) -> int:
    """A chunk of one node's log, by the node's own byte offset, appended to the run's
    one log (nodes send whole lines, so lines of different nodes never mix)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise Invalid("offset (a non-negative integer) is required", "offset")
    if not isinstance(data, str):
        raise Invalid("data must be a string", "data")
    if offset > node.log_size:
        raise LogGap(node.log_size, offset)
    raw = data.encode("utf-8")
    new = raw[node.log_size - offset:]
    if new:
        run_files.append_log(data_dir, session, run, run.log_size,
                             new.decode("utf-8", "replace"))
    node.log_size = max(node.log_size, offset + len(raw))
    return node.log_size


def node_end(session: Session, run: Run, node: RunNode, to: str, reason: str,
             reason_code: str) -> tuple[str, str, str] | None:
    """A node reports how its share ended: (to, reason, reason_code) for the run, or None
    while other nodes are still working. Any node failing ends the run at once."""
    node.status = DONE
    name = f"node {node.node_rank} ({node.runner.name})"
    if to == statuses.SUCCEEDED:
        session.flush()
        if nodes_of(session, run, *HOLDING):
            run.lease_expires_at = earliest(session, run)
            return None
        if run.result is None:
            return statuses.FAILED, "no node sent rank 0's result.json", "exit_code"
        return statuses.SUCCEEDED, "", ""
    if run.cancel_requested_at is not None:
        return statuses.CANCELLED, f"cancelled by the owner ({name} stopped)", "cancelled"
    return to, f"{name}: {reason}" if reason else f"{name} ended {to}", reason_code


def members_json(session: Session, run: Run) -> list[dict]:
    return [{"node_rank": n.node_rank, "runner": n.runner.name, "status": n.status}
            for n in nodes_of(session, run, JOINED, *HOLDING, DONE)]
