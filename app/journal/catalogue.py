"""The catalogue as the server knows it: the lab's experiments (jobs/lab/catalogue, from
code) and the owner's own, which exist only where a runner installed them and said so
when it registered (jobs/lab/catalogue/own.py declares them; runner.experiments keeps
what each runner last reported).

The web never uploads or runs an own experiment's code: it stores the declarations it
was told, checked again here with the lab's own check, validates a run's parameters
against them with the lab's own types, and leases the run only to a runner that reported
that experiment. When two runners report different versions of one, the runner heard
from last is the one the form follows; the runner that runs it checks the parameters
again against its own file (the lab's door).
"""

from __future__ import annotations

import copy
import difflib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Invalid
from app.models import Run, RunMetric, Runner
from jobs.lab.catalogue import own, registry

MAX_REPORTED = own.MAX_FILES


def check_report(experiments: Any) -> list[dict]:
    """What a runner may say it has installed: declarations (checked again here, so a
    runner cannot place a form the lab would not build) and broken files with a reason.
    A declaration that fails the check is kept as broken, with the server's reason."""
    if experiments is None:
        return []
    if not isinstance(experiments, list) or len(experiments) > MAX_REPORTED:
        raise Invalid(f"experiments is a list of at most {MAX_REPORTED}", "experiments")
    out = []
    for i, entry in enumerate(experiments):
        if not isinstance(entry, dict):
            raise Invalid(f"experiments[{i}] is an object", "experiments")
        name = str(entry.get("name", ""))[:40] or f"#{i}"
        where = str(entry.get("file", ""))[:200]
        if "broken" in entry:
            out.append({"name": name, "file": where, "broken": str(entry["broken"])[:300]})
            continue
        try:
            decl = own.check_declaration({k: v for k, v in entry.items() if k != "file"})
        except own.Broken as exc:
            out.append({"name": name, "file": where, "broken": f"refused by the server: {exc}"})
            continue
        out.append({**decl, "file": where})
    return out


def _runners(session: Session) -> list[Runner]:
    """Oldest heard first, so the newest report of a name is the one kept."""
    return list(session.scalars(sa.select(Runner).order_by(
        sa.func.coalesce(Runner.last_seen_at, Runner.created_at), Runner.id)))


def owned(session: Session) -> dict[str, dict]:
    """The own experiments some runner reported (not broken), by name, each with the
    runners that have it."""
    found: dict[str, dict] = {}
    hosts: dict[str, list[str]] = {}
    for runner in _runners(session):
        for entry in runner.experiments or []:
            if "broken" in entry or entry.get("name") in registry.EXPERIMENTS:
                continue
            found[entry["name"]] = entry
            hosts.setdefault(entry["name"], []).append(runner.name)
    return {name: {**copy.deepcopy(entry), "schema_version": registry.SCHEMA_VERSION,
                   "own": True, "runners": sorted(hosts[name]), "result": _reports(entry)}
            for name, entry in sorted(found.items())}


def _reports(entry: dict) -> str:
    """What it reports, in a line (the form's "Result:", as the lab's say theirs)."""
    kinds = [(kind, list(entry.get("reports", {}).get(kind, {})))
             for kind in ("scalars", "series", "tables")]
    return "; ".join(f"{kind} {', '.join(names)}" for kind, names in kinds if names) \
        or "nothing declared"


def broken(session: Session) -> list[dict]:
    """Every file a runner found broken: name, file, reason and the runner."""
    return [{**entry, "runner": runner.name} for runner in _runners(session)
            for entry in runner.experiments or [] if "broken" in entry]


def catalogue(session: Session) -> list[dict]:
    """The lab's experiments, then the owner's own."""
    return registry.catalogue() + list(owned(session).values())


def describe(session: Session, name: str) -> dict:
    """One experiment as the form builds it; registry.UnknownExperiment if none."""
    if name in registry.EXPERIMENTS:
        return registry.describe(name)
    found = owned(session).get(name)
    if found is None:
        raise registry.UnknownExperiment(name)
    return found


def check_filter(session: Session, name: str) -> None:
    """Invalid unless runs of `name` may exist: an experiment of the catalogue, or one that
    runs were made of (an own experiment no runner reports any more). A typo must not read
    as "no runs yet": the message offers the closest names, else every known one."""
    known = {*registry.EXPERIMENTS, *owned(session)}
    if name in known:
        return
    known |= set(session.scalars(sa.select(Run.experiment).distinct()))
    if name in known:
        return
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.5)
    said = (f"did you mean {' or '.join(close)}?" if close
            else f"the experiments are {', '.join(sorted(known))}")
    raise Invalid(f"no experiment {name[:100]!r}: {said}", "experiment")


def check_sort(session: Session, key: str) -> None:
    """Invalid unless runs may be sorted by `key` (run_metrics.check_sort_key's form): a
    result alone, or after a strategy or collective that an experiment offers (a choice of
    a list parameter: strategies, ops) or that a run reported. As with check_filter, a typo
    must not read as "no runs"."""
    group, dot, _ = key.rpartition(".")
    if not dot:
        return
    offered = {choice for experiment in catalogue(session)
               for spec in experiment["params"].values() if spec["type"] == "str_list"
               for choice in spec.get("choices", ())}
    if group in offered or session.scalar(
            sa.select(RunMetric.run_id).where(RunMetric.key == key).limit(1)) is not None:
        return
    close = difflib.get_close_matches(group, sorted(offered), n=3, cutoff=0.5)
    said = f"did you mean {' or '.join(close)}?" if close else "none offers it"
    raise Invalid(f"no strategy or collective {group[:40]!r} to sort by: {said}", "sort")


def titles(session: Session) -> dict[str, str]:
    return {e["name"]: e["title"] for e in catalogue(session)}


def validate(session: Session, name: str, params: Any) -> dict:
    """The parameters resolved against the lab's schema or the reported declaration;
    registry.ParamError naming the parameter."""
    if name in registry.EXPERIMENTS:
        return registry.validate(name, params)
    found = owned(session).get(name)
    if found is None:
        raise registry.ParamError("experiment", f"unknown experiment {name!r}: neither the "
                                                "lab's nor one a runner has reported")
    return registry.validate_declared(found, params)


def offers(runner: Runner, experiment: str) -> bool:
    """Whether this runner can run it: every runner has the lab's; an own experiment
    only the runners that reported it (and not as broken)."""
    return experiment in registry.EXPERIMENTS or any(
        entry.get("name") == experiment and "broken" not in entry
        for entry in runner.experiments or [])
