"""The owner's own experiments: Python files in a folder on the runner host (named by
COMMONPLACE_EXPERIMENTS), each declaring one experiment in the catalogue's own terms and
defining the function that runs it (docs/EXPERIMENTS.md, *Your own experiments*).

A file declares ``EXPERIMENT = {...}`` and defines ``def run(lab, params)``. The
declaration is read here without running the file: it must be a literal (numbers,
strings, lists, dicts), taken with ast.literal_eval. So listing the folder never imports
torch, never runs the owner's code outside a run, and a file that does not parse, or
declares nothing usable, is one *broken* entry with its reason, never an error that hides
the other files. The same check runs again on the server when a runner reports what it
has (a runner's word is not trusted further than its own files).

Parameters use the schemas.py types (int, float, str, bool, str_list with min, max,
choices), so the web builds the same validated form and registry.validate_declared
resolves them as it resolves the lab's own. Every own experiment has ``world_size``
(the launcher starts that many ranks); ``device``, when declared, chooses among auto,
cpu and cuda as the lab's do.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

from jobs.lab.catalogue import registry

FOLDER_ENV = "COMMONPLACE_EXPERIMENTS"
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
TYPES = ("int", "float", "str", "bool", "str_list")
DEVICES = ("auto", "cpu", "cuda")
REPORT_KINDS = ("scalars", "series", "tables")
MAX_FILES = 50
MAX_FILE_BYTES = 256 * 1024
MAX_PARAMS = 40
MAX_REPORTS = 40  # of each kind
MAX_WORLD = 64
KEYS = {"name", "title", "description", "params", "reports", "min_world_size"}
PARAM_KEYS = {"type", "default", "description", "min", "max", "choices"}


class Broken(ValueError):
    """A declaration that cannot be used, and why (shown in the catalogue)."""


def _text(value: Any, where: str, limit: int, *, empty: bool = False) -> str:
    if not isinstance(value, str) or len(value) > limit or (not empty and not value.strip()):
        raise Broken(f"{where} must be {'a' if empty else 'a non-empty'} string of at most "
                     f"{limit} characters")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _param(name: str, spec: Any) -> dict[str, Any]:
    where = f"params.{name}"
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", name):
        raise Broken(f"{where}: a parameter name is lowercase letters, digits and _")
    if not isinstance(spec, dict) or set(spec) - PARAM_KEYS or "type" not in spec \
            or "default" not in spec:
        raise Broken(f"{where} is a dict of type and default (and description, min, max, "
                     "choices)")
    kind = spec["type"]
    if kind not in TYPES:
        raise Broken(f"{where}.type must be one of {', '.join(TYPES)}")
    out = {"type": kind, "description": _text(spec.get("description", ""),
                                              f"{where}.description", 500, empty=True)}
    for bound in ("min", "max"):
        if bound in spec:
            if kind not in ("int", "float") or not _number(spec[bound]):
                raise Broken(f"{where}.{bound} is a number, for an int or float parameter")
            out[bound] = spec[bound]
    if "choices" in spec:
        choices = spec["choices"]
        if kind not in ("str", "str_list") or not isinstance(choices, list) or not choices \
                or len(choices) > 50 or not all(isinstance(c, str) and 0 < len(c) <= 60
                                                for c in choices):
            raise Broken(f"{where}.choices is a list of short strings, for str or str_list")
        out["choices"] = list(dict.fromkeys(choices))
    try:  # the default must be a value its own form would accept
        out["default"] = registry.coerce(name, out, spec["default"])
    except registry.ParamError as exc:
        raise Broken(f"{where}.default: {exc.message}") from None
    if isinstance(out["default"], str) and len(out["default"]) > 200:
        raise Broken(f"{where}.default is at most 200 characters")
    return out


def _reports(reports: Any) -> dict[str, dict[str, dict[str, str]]]:
    if not isinstance(reports, dict) or set(reports) - set(REPORT_KINDS):
        raise Broken(f"reports is a dict of {', '.join(REPORT_KINDS)}")
    out: dict[str, dict[str, dict[str, str]]] = {}
    for kind in REPORT_KINDS:
        items = reports.get(kind, {})
        if not isinstance(items, dict) or len(items) > MAX_REPORTS:
            raise Broken(f"reports.{kind} is a dict of at most {MAX_REPORTS} names")
        out[kind] = {}
        for name, about in items.items():
            where = f"reports.{kind}.{name}"
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise Broken(f"{where}: a name is lowercase letters, digits and _")
            if isinstance(about, str):
                about = {"description": about}
            allowed = {"description", "unit", "better"} | ({"spread"} if kind == "scalars"
                                                          else set())
            if not isinstance(about, dict) or set(about) - allowed:
                raise Broken(f"{where} is a description, or a dict of "
                             f"{', '.join(sorted(allowed))}")
            if about.get("better", "") not in ("", "higher", "lower"):
                raise Broken(f"{where}.better is 'higher' or 'lower' (how compare judges it)")
            out[kind][name] = {"description": _text(about.get("description", ""),
                                                    f"{where}.description", 300, empty=True),
                               "unit": _text(about.get("unit", ""), f"{where}.unit", 20,
                                             empty=True),
                               "better": about.get("better", "")}
            if about.get("spread"):
                out[kind][name]["spread"] = about["spread"]
    for name, about in out["scalars"].items():
        # the series of per-step values whose p10-p90 is the scalar's noise (trends)
        if "spread" in about and not (isinstance(about["spread"], str)
                                      and about["spread"] in out["series"]):
            raise Broken(f"reports.scalars.{name}.spread names a declared series")
    return out


def check_declaration(decl: Any) -> dict[str, Any]:
    """The declaration, normalised (every key present), or Broken saying what is wrong."""
    if not isinstance(decl, dict):
        raise Broken("EXPERIMENT must be a dict")
    if set(decl) - KEYS:
        raise Broken(f"EXPERIMENT has unknown key(s) {sorted(set(decl) - KEYS)}; "
                     f"known: {sorted(KEYS)}")
    name = decl.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise Broken("name must be lowercase letters, digits and _ (at most 40), "
                     "starting with a letter")
    if name in registry.EXPERIMENTS:
        raise Broken(f"name {name!r} is one of the lab's own experiments; choose another")
    params = decl.get("params")
    if not isinstance(params, dict) or not 0 < len(params) <= MAX_PARAMS:
        raise Broken(f"params must be a dict of 1 to {MAX_PARAMS} parameters")
    checked = {str(k): _param(str(k), v) for k, v in params.items()}
    world = checked.get("world_size")
    if world is None or world["type"] != "int" or not 1 <= world.get("min", 0) \
            or not world.get("max", MAX_WORLD + 1) <= MAX_WORLD:
        raise Broken(f"params.world_size is required: an int with min >= 1 and max <= "
                     f"{MAX_WORLD} (the ranks torchrun starts)")
    device = checked.get("device")
    if device is not None and (device["type"] != "str"
                               or not set(device.get("choices", [])) <= set(DEVICES)
                               or not device.get("choices")):
        raise Broken(f"params.device is a str with choices among {', '.join(DEVICES)}")
    least = decl.get("min_world_size", 1)
    if isinstance(least, bool) or not isinstance(least, int) or not 1 <= least <= MAX_WORLD:
        raise Broken(f"min_world_size is a whole number from 1 to {MAX_WORLD}")
    return {"name": name, "title": _text(decl.get("title"), "title", 120),
            "description": _text(decl.get("description", ""), "description", 2000,
                                 empty=True),
            "params": checked, "reports": _reports(decl.get("reports", {})),
            "min_world_size": least}


def read_file(path: Path) -> dict[str, Any]:
    """One file's declaration (with "file"), or {"name", "file", "broken": reason}."""
    found: dict[str, Any] = {"name": path.stem.lower()[:40], "file": path.name}
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise Broken(f"the file is larger than {MAX_FILE_BYTES // 1024} KiB")
        tree = ast.parse(path.read_bytes(), filename=path.name)
    except SyntaxError as exc:
        return {**found, "broken": f"syntax error, line {exc.lineno}: {exc.msg}"}
    except (Broken, OSError, ValueError) as exc:
        return {**found, "broken": str(exc)[:300]}
    assigned = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "EXPERIMENT" for t in node.targets)]
    runs = [node for node in tree.body if isinstance(node, ast.FunctionDef)
            and node.name == "run"]
    try:
        if not assigned:
            raise Broken("the file declares no EXPERIMENT = {...}")
        try:
            decl = ast.literal_eval(assigned[-1])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise Broken("EXPERIMENT must be a literal: numbers, strings, lists and dicts, "
                         "no names or calls") from None
        if isinstance(decl, dict) and isinstance(decl.get("name"), str):
            found["name"] = decl["name"][:40]
        if not runs or len(runs[-1].args.args) < 2:
            raise Broken("the file defines no run(lab, params) function")
        return {**check_declaration(decl), "file": path.name}
    except Broken as exc:
        return {**found, "broken": str(exc)[:300]}


def read_folder(folder: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every experiment file in the folder (COMMONPLACE_EXPERIMENTS when not given), in
    name order: declarations and broken entries. A name declared twice is broken the
    second time. No folder configured: nothing."""
    folder = folder if folder is not None else os.environ.get(FOLDER_ENV, "")
    if not folder:
        return []
    root = Path(folder)
    try:
        files = sorted(p for p in root.iterdir() if p.suffix == ".py" and p.is_file()
                       and not p.name.startswith(("_", ".")))
    except OSError as exc:
        return [{"name": "folder", "file": str(root)[:200],
                 "broken": f"{FOLDER_ENV} cannot be read: {exc.strerror or exc}"}]
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for path in files[:MAX_FILES]:
        entry = read_file(path)
        if "broken" not in entry and entry["name"] in seen:
            entry = {"name": entry["name"], "file": path.name,
                     "broken": f"{entry['name']!r} is declared by {seen[entry['name']]} too"}
        seen.setdefault(entry["name"], path.name)
        out.append(entry)
    return out


def find(name: str, folder: str | os.PathLike | None = None) -> tuple[dict[str, Any], Path]:
    """The declaration of own experiment `name` and its file, or ParamError saying why it
    cannot run here."""
    root = folder if folder is not None else os.environ.get(FOLDER_ENV, "")
    for entry in read_folder(root):
        if entry["name"] == name:
            if "broken" in entry:
                raise registry.ParamError("experiment", f"{entry['file']} is broken: "
                                                        f"{entry['broken']}")
            return entry, Path(root) / entry["file"]
    raise registry.ParamError("experiment", f"unknown experiment {name!r}: neither the lab's "
                                            f"nor a file in {FOLDER_ENV} declares it")


def validate(name: str, params: Any, folder: str | os.PathLike | None = None) -> dict[str, Any]:
    """The lab's experiment, or the owner's own one of that name, resolved (ParamError)."""
    if name in registry.EXPERIMENTS:
        return registry.validate(name, params)
    return registry.validate_declared(find(name, folder)[0], params)
