"""Command line of the lab.

    python -m jobs.lab list [--json]     the lab's and the owner's own experiments
    python -m jobs.lab describe <experiment>
    python -m jobs.lab run <experiment> [--params '<json>'] --out DIR [--timeout S]
                           [--gang '{"nodes": N, "node_rank": K, "endpoint": "H:P", ...}']
    python -m jobs.lab check <experiment> --params '<json>'
    python -m jobs.lab table DIR [DIR ...]
    python -m jobs.lab own [FOLDER]     the owner's own experiments (COMMONPLACE_EXPERIMENTS)

``run`` prints ``progress step=<i> total=<n> key=value ...`` lines and free-form
log lines to stdout, writes DIR/result.json and DIR/events.jsonl, and exits with
the codes of base/contract.py. Nothing here imports torch: ``run`` starts it in
the ranks.
"""

from __future__ import annotations

import argparse
import json
import sys

from base import contract
from jobs.lab.catalogue import own, registry
from jobs.lab.launcher import launch
from jobs.lab.launcher.report import table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.lab")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="the experiment catalogue")
    ls.add_argument("--json", action="store_true")
    ds = sub.add_parser("describe", help="one experiment's schema as JSON")
    ds.add_argument("experiment")
    rn = sub.add_parser("run", help="run one experiment under torchrun")
    rn.add_argument("experiment")
    rn.add_argument("--params", default="{}", help="JSON object of parameters")
    rn.add_argument("--out", required=True, help="directory for result.json and events")
    rn.add_argument("--timeout", type=float, default=None, help="watchdog, seconds")
    rn.add_argument("--gang", default=None,
                    help="JSON: this host's share of a run that spans hosts (the runner's lease)")
    ck = sub.add_parser("check", help="validate parameters, print them resolved")
    ck.add_argument("experiment")
    ck.add_argument("--params", default="{}")
    ow = sub.add_parser("own", help="the own experiments' declarations as JSON (broken "
                                    "files with why)")
    ow.add_argument("folder", nargs="?", default=None)
    tb = sub.add_parser("table", help="one table from result.json files")
    tb.add_argument("dirs", nargs="+")
    args = ap.parse_args(argv)

    if args.cmd == "list":
        mine = [{**e, "own": True} for e in own.read_folder()]
        if args.json:
            print(json.dumps(registry.catalogue() + mine, indent=1))
        else:
            for exp in registry.catalogue():
                print(f"{exp['name']:<16} {exp['title']}")
            for exp in mine:
                said = f"broken: {exp['broken']}" if "broken" in exp else exp["title"]
                print(f"{exp['name']:<16} (own, {exp['file']}) {said}")
        return 0
    if args.cmd == "describe":
        try:
            print(json.dumps(registry.describe(args.experiment), indent=1))
        except registry.UnknownExperiment:
            print(f"error: unknown experiment {args.experiment}", file=sys.stderr)
            return contract.EXIT_CODES["invalid_params"]
        return 0
    if args.cmd == "check":
        try:
            print(json.dumps(own.validate(args.experiment, json.loads(args.params))))
        except (registry.ParamError, json.JSONDecodeError) as exc:
            param = getattr(exc, "param", "params")
            print(f"error: invalid parameter {param}: {getattr(exc, 'message', exc)}",
                  file=sys.stderr)
            return contract.EXIT_CODES["invalid_params"]
        return 0
    if args.cmd == "own":
        print(json.dumps(own.read_folder(args.folder)))
        return 0
    if args.cmd == "table":
        print(table(args.dirs))
        return 0

    try:
        params = json.loads(args.params)
        gang = json.loads(args.gang) if args.gang is not None else None
    except json.JSONDecodeError as exc:
        print(f"error: invalid parameter params: not JSON ({exc})", file=sys.stderr)
        return contract.EXIT_CODES["invalid_params"]
    timeout = args.timeout if args.timeout is not None else launch.DEFAULT_TIMEOUT_S
    return launch.run(args.experiment, params, args.out, timeout, gang=gang)


if __name__ == "__main__":
    sys.exit(main())
