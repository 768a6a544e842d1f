"""One typed definition of every setting (Kafka's `ConfigDef`): name, type, default, allowed values,
importance, a one-line doc and the Kafka name it mirrors, from which parsing, validation, error messages and
the README's settings tables all come.

Where it lives: below `records`, the bottom layer, as a module that imports nothing from sparklog, because
every layer declares settings with it (storage: topic configs; broker: server.properties; client: producer
and consumer settings; datasource: Spark options) and a layer may only import downward. It is not part of
the record format, so it does not go inside `records`.

Rule 1: a setting is one declaration, `Setting("segment.bytes", INT, DEFAULT_SEGMENT_BYTES, "doc", low=1)`,
in its layer's `Definitions` table; adding a setting is adding that line.
Rule 2: `Definitions.parse(props)` takes strings (as in a .properties file, a command line or Spark's
options) or Python values, and returns every setting typed, with the defaults filled in. An unknown key is one
line naming it and the nearest known one (`unknown setting 'segment.byte'; did you mean 'segment.bytes'?`),
raised, warned about or ignored as the table's `unknown` policy says (Kafka's broker and clients warn; a typo
in a topic config or a Spark option is refused).
Rule 3: a bad value is one line naming the key, the value and the rule (`segment.bytes: must be an integer
(int) in [1, 2147483647], not 0`), raised as the table's own error class, so each layer keeps its error type.
Rule 4: a value of the right type is checked too (ranges, choices, the setting's own rule), so a default or a
Python value cannot bypass what a string must pass.
"""

from __future__ import annotations

import difflib
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

log = logging.getLogger(__name__)

# Kafka's ConfigDef types, with the code DescribeConfigs v3+ reports (DescribeConfigsResponse.ConfigType).
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    "boolean", "string", "int", "short", "long", "double", "list", "class", "password")
TYPE_CODES = {BOOLEAN: 1, STRING: 2, INT: 3, SHORT: 4, LONG: 5, DOUBLE: 6, LIST: 7, CLASS: 8, PASSWORD: 9}
INTEGER_TYPES = (INT, SHORT, LONG)
INT32_MAX = 2**31 - 1  # Kafka's Integer.MAX_VALUE
LONG_MAX = 2**63 - 1  # Kafka's Long.MAX_VALUE, its "never" for flush.messages and flush.ms

HIGH, MEDIUM, LOW = "high", "medium", "low"  # Kafka's ConfigDef.Importance

RAISE, WARN, IGNORE = "raise", "warn", "ignore"  # what a table does with an unknown key (Rule 2)
_NEAREST_CUTOFF = 0.6  # difflib's similarity below which no "did you mean" is offered


class SettingError(ValueError):
    """A setting's value or name is not valid; the default error class of a table."""


@dataclass(frozen=True)
class Setting:
    """One setting. `type` is one of Kafka's ConfigDef types; `low`/`high` bound numbers; `choices` are
    the allowed strings (matched case-insensitively, stored as spelled here; for a list, its items);
    `rule` is an extra check returning the problem or None; `default=None` means "unset"; `kafka` names
    the Kafka setting this mirrors when its name differs or it is Kafka's ("" when it is ours alone);
    `synonym` is another table's name for the same setting (a topic config's broker default)."""

    name: str
    type: str
    default: Any
    doc: str
    importance: str = MEDIUM
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    rule: Callable[[Any], str | None] | None = None
    kafka: str | None = None
    synonym: str | None = None
    convert: Callable[[Any], Any] | None = None  # a value of a form only this setting accepts -> its type
    dynamic: bool = False  # a broker setting Kafka lets IncrementalAlterConfigs change at runtime (broker/config.py)

    @property
    def type_code(self) -> int:
        return TYPE_CODES[self.type]

    def parse(self, value: Any, error: type[Exception] = SettingError, label: str = "{}") -> Any:
        """A string (or a Python value) to this setting's type, checked (Rules 3 and 4)."""
        name = label.format(self.name)
        if self.convert is not None:
            value = self.convert(value)
        if self.type == BOOLEAN:
            parsed = _parse_bool(name, value, error)
        elif self.type in INTEGER_TYPES:
            parsed = _parse_int(name, value, error)
        elif self.type == DOUBLE:
            parsed = _parse_double(name, value, error)
        elif value is None:
            parsed = None
        else:
            parsed = self._parse_text(str(value).strip())
        self.check(parsed, error, label)
        return parsed

    def _parse_text(self, text: str) -> str:
        if self.type == LIST:
            items = (item.strip() for item in text.split(",") if item.strip())
            return ",".join(dict.fromkeys(item.lower() if self.choices else item for item in items))
        for choice in self.choices:
            if text.lower() == choice.lower():
                return choice
        return text

    def check(self, value: Any, error: type[Exception] = SettingError, label: str = "{}") -> None:
        """Raise `error` naming the setting when `value` (of this setting's type) is not allowed."""
        problem = self.problem(value)
        if problem:
            raise error(f"{label.format(self.name)}: {problem}")

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value`, or None."""
        if value is None:
            return None if self.default is None else f"must be set ({self.rule_text()})"
        if self.type == BOOLEAN:
            if not isinstance(value, bool):
                return f"must be true or false, not {value!r}"
        elif self.type in INTEGER_TYPES or self.type == DOUBLE:
            problem = self._number_problem(value)
            if problem:
                return problem
        elif not isinstance(value, str):
            return f"must be a string, not {value!r}"
        elif self.type == LIST and self.choices:
            items = value.split(",") if value else []
            if not items or any(item not in self.choices for item in items):
                return f"must be a list of {', '.join(self.choices)}, not {value!r}"
        elif self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}, not {value!r}"
        return self.rule(value) if self.rule else None

    def _number_problem(self, value: Any) -> str | None:
        numeric = (int, float) if self.type == DOUBLE else (int,)
        if not isinstance(value, numeric) or isinstance(value, bool):
            return f"must be {'a number' if self.type == DOUBLE else 'an integer'}, not {value!r}"
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return f"must be {self.rule_text()}, not {value!r}"
        return None

    def rule_text(self) -> str:
        """The allowed values in words, for errors and the docs: `an integer (int) in [1, 2147483647]`."""
        if self.type in INTEGER_TYPES or self.type == DOUBLE:
            kind = "a number" if self.type == DOUBLE else f"an integer ({self.type})"
            if self.low is not None and self.high is not None:
                return f"{kind} in [{self.low}, {self.high}]"
            if self.low is not None:
                return f"{kind} of at least {self.low}"
            return kind if self.high is None else f"{kind} of at most {self.high}"
        if self.type == BOOLEAN:
            return "true or false"
        if self.choices:
            return f"{'a list of' if self.type == LIST else 'one of'} {', '.join(self.choices)}"
        return "a list" if self.type == LIST else "a string"

    def format(self, value: Any) -> str:
        """The value as Kafka prints it (`true`, `compact,delete`, `9223372036854775807`, "" for unset)."""
        if isinstance(value, bool):
            return "true" if value else "false"
        return "" if value is None else str(value)


class Definitions(Mapping[str, Setting]):
    """A table of settings (one layer's), read-only, in declaration order.

    `error` is the exception class a bad value raises (Rule 3); `label` formats a setting's name in
    messages (the Spark source says `Option 'failOnDataLoss'`); `unknown` is the policy for keys not in the
    table (Rule 2); `case_insensitive` matches names ignoring case (Spark passes options lower-cased).
    """

    def __init__(self, title: str, settings: Iterable[Setting], *, error: type[Exception] = SettingError,
                 label: str = "{}", unknown: str = RAISE, case_insensitive: bool = False,
                 noun: str = "setting", listed_in: str | None = None) -> None:
        self.title = title
        self.listed_in = listed_in  # where a user reads the table (an unknown name's message says so)
        self.noun = f"{title} {noun}"
        self.error = error
        self.label = label
        self.unknown = unknown
        self.case_insensitive = case_insensitive
        self._settings: dict[str, Setting] = {}
        for setting in settings:
            key = self._fold(setting.name)
            if key in self._settings:
                raise ValueError(f"setting {setting.name!r} is declared twice in {title}")
            if setting.default is not None:
                setting.check(setting.default, TypeError)  # a declaration error, found at import
            self._settings[key] = setting

    def _fold(self, name: str) -> str:
        return name.lower() if self.case_insensitive else name

    def __getitem__(self, name: str) -> Setting:
        return self._settings[self._fold(name)]

    def __iter__(self) -> Iterator[str]:
        return (setting.name for setting in self._settings.values())

    def __len__(self) -> int:
        return len(self._settings)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._fold(name) in self._settings

    def defaults(self) -> dict[str, Any]:
        return {setting.name: setting.default for setting in self._settings.values()}

    def nearest(self, name: str) -> str | None:
        """The known name closest to a misspelt one, or None when nothing is close."""
        folded = {self._fold(known): known for known in self}
        close = difflib.get_close_matches(self._fold(name), list(folded), n=1, cutoff=_NEAREST_CUTOFF)
        return folded[close[0]] if close else None

    def unknown_message(self, name: str, spelt: str | None = None) -> str:
        """`unknown broker setting 'num.partition'; did you mean 'num.partitions'?` (one line, Rule 2);
        `spelt` is the name as the user wrote it, when `name` is a normalized form of it."""
        nearest = self.nearest(name)
        where = f" in {self.listed_in}" if self.listed_in else ""
        hint = f"did you mean {nearest!r}?" if nearest else f"see the {self.title} settings{where}"
        return f"unknown {self.noun} {spelt or name!r}; {hint}"

    def check_known(self, names: Iterable[str], policy: str | None = None) -> list[str]:
        """Apply the unknown-key policy to `names`; returns the unknown ones (when not raised)."""
        unknown = [name for name in names if name not in self]
        policy = policy or self.unknown
        for name in unknown:
            if policy == RAISE:
                raise self.error(self.unknown_message(name))
            if policy == WARN:
                log.warning("%s; ignored", self.unknown_message(name))
        return unknown

    def value(self, props: Mapping[str, Any], name: str) -> Any:
        """One setting from `props` (absent or "" gives its default), parsed and checked."""
        setting = self[name]
        raw = props.get(setting.name, props.get(self._fold(setting.name)) if self.case_insensitive else None)
        if raw is None or (isinstance(raw, str) and not raw.strip() and setting.type != STRING):
            return setting.default
        return setting.parse(raw, self.error, self.label)

    def values_of(self, props: Mapping[str, Any]) -> list[Any]:
        """Every setting's value from `props`, in table order: the fields of a config dataclass declared in
        the same order (`Config(*TABLE.values_of(props))`)."""
        return [self.value(props, name) for name in self]

    def check_all(self, values: Iterable[Any]) -> None:
        """Check values given in table order (a config dataclass built in code rather than from props)."""
        for name, value in zip(self, values):
            self[name].check(value, self.error, self.label)

    def parse(self, props: Mapping[str, Any], policy: str | None = None) -> dict[str, Any]:
        """Every setting of the table from `props`, typed, with defaults (Rule 2); keys outside the table
        are handled by `policy` (default: the table's)."""
        self.check_known(props, policy)
        return {name: self.value(props, name) for name in self}

    def markdown(self) -> str:
        """This table as the README shows it: name, type, default, allowed values, importance, doc."""
        lines = ["| setting | type | default | valid values | importance | description |",
                 "|---|---|---|---|---|---|"]
        for setting in self.values():
            doc = setting.doc
            if setting.kafka is not None:
                doc += " (sparklog's own)" if setting.kafka == "" else f" (Kafka: `{setting.kafka}`)"
            cells = (f"`{setting.name}`", setting.type, _default_text(setting), setting.rule_text(),
                     setting.importance, doc)
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        return "\n".join(lines)


def _default_text(setting: Setting) -> str:
    if setting.default is None:
        return "(unset)"
    text = setting.format(setting.default)
    return f"`{text}`" if text else '`""`'


def _parse_bool(name: str, value: Any, error: type[Exception]) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise error(f"{name} must be true or false, not {value!r}")
    return text == "true"


def _parse_int(name: str, value: Any, error: type[Exception]) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return int(value.strip())
    except ValueError:
        raise error(f"{name} must be an integer, not {value!r}") from None


def _parse_double(name: str, value: Any, error: type[Exception]) -> Any:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return value
    try:
        number = float(str(value).strip())
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise error(f"{name} must be a number, not {value!r}")
    return number
