"""Forms generated from the lab's parameter schemas, and the schedule form around them.

The registry (jobs/lab/catalogue/registry.py) is the one place that knows what a parameter may be
(an own experiment's declaration uses its types: jobs/lab/catalogue/own.py);
these forms only turn what a browser sends (strings) into the JSON types the registry
checks, so a mistyped number is reported next to its field instead of as a type error.
Parameter inputs are named "param.<name>" so they can never collide with a schedule's own
fields on the same form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from werkzeug.datastructures import MultiDict

PREFIX = "param."


@dataclass
class ParamField:
    """One input of the generated form: its schema, and what it currently shows."""

    name: str
    spec: dict
    value: Any  # the typed value, or the raw text the user typed when it did not parse

    @property
    def input_name(self) -> str:
        return PREFIX + self.name

    @property
    def input_id(self) -> str:
        return "p-" + self.name

    @property
    def kind(self) -> str:
        """How it is drawn: number, select, checkbox, checkboxes or text."""
        type_ = self.spec["type"]
        if type_ in ("int", "float"):
            return "number"
        if type_ == "bool":
            return "checkbox"
        if type_ == "str_list":
            return "checkboxes" if self.spec.get("choices") else "text"
        return "select" if self.spec.get("choices") else "text"

    @property
    def step(self) -> str:
        return "1" if self.spec["type"] == "int" else "any"

    @property
    def default(self) -> Any:
        return self.spec.get("default")

    def shown(self) -> str:
        """The text for a number or text input."""
        value = self.value
        if isinstance(value, list):
            return ", ".join(value)
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            return repr(value)  # 0.0 stays "0.0": the field is a float
        return "" if value is None else str(value)

    def checked(self, choice: str) -> bool:
        return isinstance(self.value, list) and choice in self.value

    def bounds(self) -> str:
        low, high = self.spec.get("min"), self.spec.get("max")
        if low is not None and high is not None:
            return f"{fmt(low)} to {fmt(high)}"
        if low is not None:
            return f"at least {fmt(low)}"
        if high is not None:
            return f"at most {fmt(high)}"
        return ""

    def default_text(self) -> str:
        default = self.default
        if isinstance(default, bool):
            return "on" if default else "off"
        if isinstance(default, list):
            return ", ".join(default)
        return fmt(default)


def fmt(value: Any) -> str:
    """Numbers as a person reads them: 1048576 → 1,048,576; 0.25 stays 0.25."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


@dataclass
class ParamForm:
    experiment: str
    fields: list[ParamField]
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def initial(cls, described: dict, values: dict | None = None) -> ParamForm:
        """Defaults, overlaid with `values` (a run's or schedule's params) where they fit.
        `described`: the experiment as the catalogue describes it (app/journal/catalogue.py:
        the lab's, or an own one a runner reported)."""
        schema = described["params"]
        values = values or {}
        return cls(described["name"], [ParamField(name, spec, values.get(name, spec["default"]))
                                       for name, spec in schema.items()])

    @classmethod
    def parse(cls, described: dict, form: MultiDict) -> tuple[ParamForm, dict]:
        """The submitted params, typed; conversion problems are kept per field. The
        registry's own checks (bounds, choices, rules between params) come after, in
        runs.check_params."""
        experiment, schema = described["name"], described["params"]
        fields, params, errors = [], {}, {}
        for name, spec in schema.items():
            key = PREFIX + name
            if key not in form and spec["type"] in ("int", "float", "str"):
                # Not sent at all (a script, not this form): the default, as in the API.
                # Checkboxes cannot say "absent", so for them absence means unticked.
                fields.append(ParamField(name, spec, spec["default"]))
                continue
            try:
                value = convert(spec, form, key)
            except ValueError as exc:
                errors[name] = str(exc)
                value = form.get(key, "")
            else:
                params[name] = value
            fields.append(ParamField(name, spec, value))
        return cls(experiment, fields, errors), params

    def field_names(self) -> set[str]:
        return {f.name for f in self.fields}


def unknown_params(described: dict, form: MultiDict) -> str | None:
    """Why the form is refused if it sends a param.<name> the experiment has no parameter
    of, else None: dropped, a typo would run with the default in its place (the API refuses
    such a name too)."""
    unknown = sorted(k for k in form if k.startswith(PREFIX)
                     and k.removeprefix(PREFIX) not in described["params"])
    return f"{unknown[0][:60]}: not a parameter of {described['name']}" if unknown else None


def convert(spec: dict, form: MultiDict, key: str) -> Any:
    """One field's text → the JSON type the schema asks for (ValueError with a message)."""
    kind = spec["type"]
    if kind == "bool":
        # An unchecked checkbox sends nothing: absent means off.
        return form.get(key) in ("on", "true", "1")
    if kind == "str_list":
        if spec.get("choices"):
            return form.getlist(key)
        return [v.strip() for v in form.get(key, "").split(",") if v.strip()]
    text = form.get(key, "").strip()
    if kind == "str":
        return text
    if not text:
        raise ValueError(f"enter a number (default {fmt(spec['default'])})")
    if kind == "int":
        try:
            return int(text.replace("_", "").replace(",", ""))
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise ValueError(f"must be a whole number, got {text!r}") from None
            if math.isfinite(number) and number.is_integer():
                return int(number)
            raise ValueError(f"must be a whole number, got {text!r}") from None
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"must be a number, got {text!r}") from None
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    return number


# -- schedules ----------------------------------------------------------------------------


@dataclass
class ScheduleDraft:
    """The schedule form's own fields, as typed."""

    name: str = ""
    experiment: str = ""
    cron: str = "0 2 * * sun"
    timezone: str = "UTC"
    enabled: bool = True
    grace_hours: str = "6"

    @classmethod
    def of(cls, schedule) -> ScheduleDraft:
        return cls(schedule.name, schedule.experiment, schedule.cron, schedule.timezone,
                   schedule.enabled, fmt(schedule.misfire_grace_s / 3600))

    @classmethod
    def from_form(cls, form: MultiDict) -> ScheduleDraft:
        return cls(name=form.get("name", "").strip(), experiment=form.get("experiment", ""),
                   cron=form.get("cron", "").strip(), timezone=form.get("timezone", "").strip(),
                   enabled=form.get("enabled") in ("on", "true", "1"),
                   grace_hours=form.get("misfire_grace_hours", "").strip())

    def data(self, params: dict) -> tuple[dict, dict[str, str]]:
        """What schedules.create/update take, and any field that could not be read."""
        errors = {}
        grace = None
        try:
            hours = float(self.grace_hours)
            if not math.isfinite(hours):
                raise ValueError
            grace = round(hours * 3600)
        except ValueError:
            errors["misfire_grace_s"] = "misfire grace is a number of hours, e.g. 6"
        data = {"name": self.name, "experiment": self.experiment, "cron": self.cron,
                "timezone": self.timezone, "enabled": self.enabled, "params": params}
        if grace is not None:
            data["misfire_grace_s"] = grace
        return data, errors
