"""How a config section is declared and checked: a frozen pydantic dataclass, strict (no 'no' for false, no '4' for
4), bounded and closed to unknown keys, whose every failure is one line naming the field's dotted path, the value
given and what is allowed."""
from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from typing import Annotated, Any, Literal, TypeVar, dataclass_transform

import annotated_types
from pydantic import BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic.fields import FieldInfo

T = TypeVar("T")

# An empty YAML section (`thinker:`) or list (`api_keys:`) reads as None: it takes the defaults, or no items.
Section = Annotated[T, BeforeValidator(lambda value: {} if value is None else value)]
Items = Annotated[tuple[T, ...], BeforeValidator(lambda value: () if value is None else value)]

VALUE_CHARS = 40  # of a value's repr in an error: a long list, or a secret given in the wrong place, is not echoed

_KINDS = {bool: ("true or false", "booleans"), int: ("an integer", "integers"), float: ("a number", "numbers"),
          str: ("a string", "strings")}
_LIMITS = {annotated_types.Ge: ">=", annotated_types.Gt: ">", annotated_types.Le: "<=", annotated_types.Lt: "<"}
_UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")


class ConfigError(ValueError):
    """A config value the mesh cannot run with; the message is one line (`omnimesh up` prints it as is)."""


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, Field))
def config_section(cls: type[T]) -> type[T]:
    """`cls` as a frozen dataclass checked on every construction (YAML, code, `dataclasses.replace`).

    Fields declare strict types (`StrictInt`, `StrictBool`, ...: a float field still takes an int) and their bounds
    with `Field(ge=..., description=...)`, the description saying what a special value means ("0 disables");
    `__post_init__` makes the cross-field checks with `check`."""
    section = pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))(cls)
    validate = section.__init__

    @functools.wraps(validate)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            validate(self, *args, **kwargs)
        except ValidationError as err:
            raise ConfigError(describe(err, type(self))) from None

    section.__init__ = __init__  # type: ignore[method-assign]
    return section


def check(ok: bool, name: str, value: Any, fix: str) -> None:
    """A cross-field check in `__post_init__`: `name` is the field within its section, `fix` says what to change."""
    if not ok:
        raise ConfigError(f"config field {name}={_short(value)} is invalid: {fix}")


def from_dict(cls: type[T], data: Any, path: str = "") -> T:
    """Section `cls` from nested dicts (parsed YAML); errors name each key by its dotted path under `path` (e.g.
    "talker.speech.")."""
    try:
        return cls.__pydantic_validator__.validate_python(data)  # type: ignore[attr-defined]
    except ValidationError as err:
        raise ConfigError(describe(err, cls, path)) from None


def describe(err: ValidationError, root: type, path: str = "") -> str:
    """Every error of `err` (from validating section `root`), each naming its key, joined into one line."""
    return "; ".join(_describe(e, root, path) for e in err.errors(include_url=False))


def _describe(error: Any, root: type, prefix: str) -> str:
    loc, kind, value = tuple(error["loc"]), error["type"], error["input"]
    path = prefix + _dotted(loc)
    if kind == "value_error":  # a section's cross-field check: its message names the field within the section
        section = prefix + (_dotted(loc) + "." if loc else "")
        return str(error["ctx"]["error"]).replace("config field ", f"config field {section}", 1)
    if kind in _UNKNOWN_KEY:
        return _unknown_key(path, _section_at(root, loc[:-1]), str(loc[-1]), prefix + _dotted(loc[:-1]))
    if kind == "dataclass_type":
        return f"config section {path or '<root>'} must be a mapping, got {type(value).__name__}"
    field = _field_at(root, loc)
    allowed = allowed_values(field) if field is not None else "a valid value"
    given = f", not {'empty' if value is None else _a(type(value).__name__)}" if kind.endswith("_type") else ""
    return f"config field {path}={_short(value)} is invalid: use {allowed}{given}"


def _unknown_key(path: str, section: type, key: str, section_path: str) -> str:
    known = [f.name for f in dataclasses.fields(section)]
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    where = section_path.rstrip(".") or section.__name__
    return f"unknown config key {path}{hint}: {where} takes only {', '.join(known)}"


def allowed_values(field: FieldInfo) -> str:
    """What `field` takes, in words: "an integer >= 1 (0 disables)", "one of 'native', 'fp8'", "a list of integers"."""
    text = _kind(field.annotation)
    bounds = _bounds(field.metadata)
    if bounds:
        text = f"{text} {bounds}"
    return f"{text} ({field.description})" if field.description else text


def _kind(annotation: Any) -> str:
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(annotation)))
    if origin is tuple:
        item = _unwrap(typing.get_args(annotation)[0])
        return "a list of " + _KINDS.get(item, ("", "values"))[1]
    if dataclasses.is_dataclass(annotation):
        return "a mapping"
    return _KINDS.get(annotation, (str(annotation), ""))[0]


def _bounds(metadata: list[Any]) -> str:
    limits = {_LIMITS[type(m)]: dataclasses.astuple(m)[0] for m in metadata if type(m) in _LIMITS}
    low = next(((op, v) for op, v in limits.items() if op in (">=", ">")), None)
    high = next(((op, v) for op, v in limits.items() if op in ("<=", "<")), None)
    if low and high:
        return f"in {'[' if low[0] == '>=' else '('}{low[1]}, {high[1]}{']' if high[0] == '<=' else ')'}"
    bound = low or high
    return f"{bound[0]} {bound[1]}" if bound else ""


def _unwrap(annotation: Any) -> Any:
    """The type under `Annotated[...]` (pydantic's strict and bound markers)."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _field_at(root: type, loc: tuple[Any, ...]) -> FieldInfo | None:
    """The field a validation error's location names (a list item's error: the list's field)."""
    field, section = None, root
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(section, "__pydantic_fields__", {})
        if part not in fields:
            return None
        field = fields[part]
        section = _unwrap(field.annotation)
    return field


def _section_at(root: type, loc: tuple[Any, ...]) -> type:
    section = root
    for part in loc:
        section = _unwrap(section.__pydantic_fields__[part].annotation)  # type: ignore[attr-defined]
    return section


def _dotted(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).removeprefix(".")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 3] + "..."


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"
