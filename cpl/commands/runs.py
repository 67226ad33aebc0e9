"""Experiments and runs: `cpl experiments`, `cpl run`, and `cpl runs` with its
subcommands (watch, logs, cancel, rerun, compare, show)."""

from __future__ import annotations

import click
from rich.text import Text

from base import statuses
from cpl.context import Ctx, complete_from, done, json_option, pass_ctx, print_json
from cpl.failures import NOT_FOUND, ApiError, CplError
from cpl.profile import recall, remember
from cpl.run_card import show_card
from cpl.run_views import comparison, show_comparison, show_experiments, show_runs
from cpl.shapes import experiment as experiment_shape
from cpl.shapes import run_full, run_summary
from cpl.terminal import status_text
from cpl.watching import follow_logs, watch

TRUE, FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}
RUN_ID = click.IntRange(1)
interval_option = click.option("--interval", type=click.FloatRange(0.1, 60), default=2.0,
                               show_default=True, help="Seconds between looks at the run.")
exit_status_option = click.option("--exit-status", is_flag=True, help="Exit 0 only if the run "
                                  "SUCCEEDED, 7 otherwise (implies --watch).")


def coerce(name: str, spec: dict, raw: str):
    kind = spec.get("type")
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "bool":
            if raw.lower() not in TRUE | FALSE:
                raise ValueError
            return raw.lower() in TRUE
        if kind == "str_list":
            return [part.strip() for part in raw.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{name} is {'an' if kind == 'int' else 'a'} {kind}, not "
                                 f"{raw!r}", param_hint="--param") from None
    return raw


def pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def remember_runs(runs: list[dict]) -> None:
    ids = [str(r["id"]) for r in runs] + recall("runs")
    remember("runs", list(dict.fromkeys(ids)))


def announce(ctx: Ctx, run: dict, as_json: bool) -> None:
    remember_runs([run])
    if as_json:
        print_json(run_full(run, ctx.api.server))
    elif ctx.out.tty:
        ctx.out.print(Text.assemble("run ", (str(run["id"]), "id"), " ", status_text(run["status"]),
                                    f" · {run['experiment']} · {ctx.api.absolute(run['url'])}"))
        if run.get("waiting"):
            ctx.out.print(Text(f"waiting: {run['waiting']}", style="yellow"))
    else:
        ctx.out.line(str(run["id"]))
        if run.get("waiting"):
            ctx.out.note(f"run {run['id']} waits: {run['waiting']}")


@click.command("experiments", short_help="The experiment catalogue and its parameters.")
@click.argument("name", required=False, shell_complete=complete_from("experiments"))
@json_option
@pass_ctx
def experiments(ctx: Ctx, name, as_json):
    """The experiment catalogue: each experiment's parameters with defaults and bounds.

    \b
    Examples:
      cpl experiments
      cpl experiments pipeline          # one, with what each parameter means
      cpl experiments --json | jq '.experiments[].name'
    """
    if name:
        found = [ctx.api.get(f"/api/v1/experiments/{name}")]
    else:
        found = ctx.api.get("/api/v1/experiments").get("experiments") or []
        remember("experiments", [e["name"] for e in found])
    shaped = [experiment_shape(e) for e in found]
    if as_json:
        print_json({"experiments": shaped})
    else:
        show_experiments(ctx.out, shaped, detailed=bool(name))


@click.command("run", short_help="Start a run; --watch follows it.")
@click.argument("experiment", shell_complete=complete_from("experiments"))
@click.option("--param", "-p", "params", multiple=True, metavar="KEY=VALUE",
              help="A parameter (repeat for more); lists are comma-separated.")
@click.option("--requires", "-r", multiple=True, metavar="KEY=VALUE",
              help="What the host must have: gpu_model=H200, gpu_count=2.")
@click.option("--nodes", "-n", type=click.IntRange(1), default=None,
              help="Hosts that run it together (world_size / nodes ranks each) [default: 1].")
@click.option("--anyway", is_flag=True, help="Queue it even if no registered runner can "
              "take it.")
@click.option("--watch", "-w", "watching", is_flag=True, help="Follow it until it ends "
              "(with --json: the ended run's JSON).")
@exit_status_option
@interval_option
@json_option
@pass_ctx
def run(ctx: Ctx, experiment, params, requires, nodes, anyway, watching, exit_status, interval,
        as_json):
    """Start a run of EXPERIMENT and print its id; --watch follows it.

    Parameters not given take their defaults (`cpl experiments EXPERIMENT` lists them).
    Ctrl-C while watching detaches; the run goes on.

    \b
    Examples:
      cpl run pipeline --param micro_batches=8 --param world_size=2
      cpl run data_parallel -p steps=1 -p warmup=0 --watch
      cpl run collectives --requires gpu_model=H200 --watch --exit-status
      cpl run data_parallel -p world_size=4 --nodes 2 --watch
    """
    spec = ctx.api.get(f"/api/v1/experiments/{experiment}")
    schema = spec.get("params") or {}
    given = pairs(params, "--param")
    unknown = sorted(set(given) - set(schema))
    if unknown:
        raise click.BadParameter(f"{experiment} has no parameter {unknown[0]!r}; it has "
                                 f"{', '.join(schema)}", param_hint="--param")
    body = {"experiment": experiment,
            "params": {k: coerce(k, schema[k], v) for k, v in given.items()}}
    needs = pairs(requires, "--requires")
    if needs:
        body["requires"] = {k: int(v) if v.isdecimal() else v for k, v in needs.items()}
    if nodes is not None:
        body["nodes"] = nodes
    if anyway:
        body["queue_anyway"] = True
    started = ctx.api.post("/api/v1/runs", body)
    follow_up(ctx, started, watching or exit_status, exit_status, interval, as_json)


def follow_up(ctx: Ctx, started: dict, watching: bool, exit_status: bool, interval: float,
              as_json: bool) -> None:
    """Say which run started; with --watch follow it (with --json: JSON of the ended run)."""
    if not (watching and as_json):
        announce(ctx, started, as_json)
    if watching:
        then = (lambda ended: print_json(run_full(ended, ctx.api.server))) if as_json else None
        done(watch(ctx.api, ctx.out, started["id"], interval=interval, exit_status=exit_status,
                   then=then))


@click.group("runs", invoke_without_command=True,
             short_help="Runs; watch, logs, cancel, rerun, compare, show.")
@click.option("--status", "-s", "statuses", multiple=True,
              help="QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST… (repeat or "
                   "comma-separate).")
@click.option("--experiment", "-e", shell_complete=complete_from("experiments"))
@click.option("--week", help="Runs created in this ISO week (YYYY-Www).")
@click.option("--schedule", type=click.IntRange(1), help="Runs fired by this schedule.")
@click.option("-n", "--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@json_option
@pass_ctx
@click.pass_context
def runs(click_ctx, ctx: Ctx, statuses, experiment, week, schedule, limit, as_json):
    """Runs, newest first; and what to do with one (see the commands below).

    \b
    Examples:
      cpl runs
      cpl runs --status failed,lost --week 2024-W13
      cpl runs --experiment pipeline --json | jq '.runs[].id'
      cpl runs watch 42
    """
    if click_ctx.invoked_subcommand:
        return
    status = ",".join(s.upper() for s in statuses) or None
    try:
        data = ctx.api.get("/api/v1/runs", status=status, experiment=experiment, week=week,
                           schedule=schedule, limit=limit)
    except ApiError as exc:
        if exc.error.get("field") != "experiment":
            raise
        # a name no experiment has is "not found", never an empty list
        raise CplError(str(exc.error.get("message")), "cpl experiments lists them",
                       NOT_FOUND) from None
    found = data.get("runs") or []
    remember_runs(found)
    if as_json:
        print_json({"runs": [run_summary(r, ctx.api.server) for r in found],
                    "has_more": data.get("has_more", False)})
    elif not found:
        ctx.out.note("no runs")
    else:
        show_runs(ctx.out, found)


run_id_argument = click.argument("run_id", type=RUN_ID, shell_complete=complete_from("runs"))


@runs.command("watch")
@run_id_argument
@exit_status_option
@interval_option
@pass_ctx
def runs_watch(ctx: Ctx, run_id, exit_status, interval):
    """Follow a run until it ends: a progress bar on a terminal, lines in a pipe.
    Ctrl-C detaches (exit 130); the run goes on.

    \b
    Examples:
      cpl runs watch 42
      cpl runs watch 42 --exit-status && echo passed
    """
    done(watch(ctx.api, ctx.out, run_id, interval=interval, exit_status=exit_status))


@runs.command("logs")
@run_id_argument
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")
@interval_option
@pass_ctx
def runs_logs(ctx: Ctx, run_id, follow, interval):
    """A run's log; -f follows it as it grows.

    \b
    Examples:
      cpl runs logs 42
      cpl runs logs 42 -f | grep progress
    """
    done(follow_logs(ctx.api, ctx.out, run_id, follow_on=follow, interval=interval))


@runs.command("cancel")
@run_id_argument
@json_option
@pass_ctx
def runs_cancel(ctx: Ctx, run_id, as_json):
    """Cancel a run: a queued one at once, a running one at its runner's next heartbeat.

    \b
    Example:
      cpl runs cancel 42
    """
    found = ctx.api.post(f"/api/v1/runs/{run_id}/cancel")
    if as_json:
        print_json(run_full(found, ctx.api.server))
    elif found["status"] == statuses.CANCELLED:
        ctx.out.note(f"run {run_id} is CANCELLED")
    else:
        ctx.out.note(f"cancel requested: run {run_id} ({found['status']}) stops at its "
                     f"runner's next heartbeat; follow it: cpl runs watch {run_id}")


@runs.command("rerun")
@run_id_argument
@click.option("--watch", "-w", "watching", is_flag=True, help="Follow the new run.")
@exit_status_option
@interval_option
@json_option
@pass_ctx
def runs_rerun(ctx: Ctx, run_id, watching, exit_status, interval, as_json):
    """Run again with the same parameters (a new run, linked to the old one).

    \b
    Examples:
      cpl runs rerun 42
      cpl runs rerun 42 --watch --exit-status
    """
    started = ctx.api.post(f"/api/v1/runs/{run_id}/rerun")
    follow_up(ctx, started, watching or exit_status, exit_status, interval, as_json)


@runs.command("compare")
@click.argument("run_ids", type=RUN_ID, nargs=-1, required=True,
                shell_complete=complete_from("runs"))
@json_option
@pass_ctx
def runs_compare(ctx: Ctx, run_ids, as_json):
    """Compare two to ten runs: the parameters that differ, and the results side by
    side (× against the first run).

    \b
    Examples:
      cpl runs compare 41 42
      cpl runs compare 40 41 42 --json
    """
    if not 2 <= len(run_ids) <= 10:
        raise click.BadParameter("compare two to ten runs", param_hint="RUN_IDS")
    data = ctx.api.get("/api/v1/compare", ids=",".join(map(str, run_ids)))
    if as_json:
        found, params, results = comparison(data)
        print_json({"runs": [run_summary(r, ctx.api.server) for r in found],
                    "differing_params": params, "results": results})
    else:
        show_comparison(ctx.out, data)


@runs.command("show")
@run_id_argument
@json_option
@pass_ctx
def runs_show(ctx: Ctx, run_id, as_json):
    """A run's card: measured against predicted, the chart as text bars.

    \b
    Examples:
      cpl runs show 42
      cpl runs show 42 --json | jq .result
    """
    found = ctx.api.get(f"/api/v1/runs/{run_id}")
    if as_json:
        print_json(run_full(found, ctx.api.server))
        return
    try:
        title = ctx.api.get(f"/api/v1/experiments/{found['experiment']}").get("title") or ""
    except ApiError:  # an experiment since removed from the catalogue
        title = found["experiment"]
    metrics = ctx.api.get(f"/api/v1/runs/{run_id}/metrics").get("metrics") or {}
    found["url"] = ctx.api.absolute(found.get("url", ""))
    if found.get("since"):
        found["since"]["trend_url"] = ctx.api.absolute(found["since"].get("trend_url", ""))
    show_card(ctx.out, found, title, metrics)
