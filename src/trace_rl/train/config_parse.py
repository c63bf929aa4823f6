"""Turning YAML and ``section.key=value`` overrides into the frozen config dataclasses of `trace_rl.train.config`.

Values are coerced to each field's annotated type (bool, int, float, str, optional, mapping; nested dataclasses
are sections); anything else raises `ConfigError` with one line naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError
from trace_rl.spec import SpecError
from trace_rl.train.config_ranges import RANGES


class ConfigError(UserError):
    """An invalid config: the message names the key and the problem in one line."""


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Convert a YAML/CLI value to the field's type, or raise ConfigError naming the key."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return coerce(value, args[0], key)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if hint is int:
        return _integer(value, key)
    if hint is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number{_accepts(key)}, got {value!r}")
        return number
    if hint is str:
        if not isinstance(value, str | int | float):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    return value


INT_LIMIT = 2**63
"""Integers must lie in (-2**63, 2**63): the range torch and numpy index with (`_integer`)."""


def _accepts(key: str) -> str:
    """`` (accepted: >= 1)`` for a key with a range in `trace_rl.train.config_ranges.RANGES`, else ``""``."""
    r = RANGES.get(key)
    return f" (accepted: {r.text()}{'; ' + r.note if r.note else ''})" if r is not None else ""


def _integer(value: Any, key: str) -> int:
    """``value`` as an int: an int, or a string or float holding a whole finite number below `INT_LIMIT` in size
    (``"3"``, ``3.0``, ``"1e3"``); anything else (inf, nan, ``1e400``, ``2.5``, a bool) is a ConfigError."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        number = int(value)  # exact, however long (no float rounding)
    else:
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if not math.isfinite(f) or f != int(f):
            raise ConfigError(f"{key}: expected a whole finite number{_accepts(key)}, got {value!r}")
        number = int(f)
    if abs(number) >= INT_LIMIT:
        raise ConfigError(
            f"{key}: expected an integer of magnitude below 2**63{_accepts(key)}, got {value!r}"
        )
    return number


def build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = field_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(f"{full}: unknown key (known: {', '.join(sorted(names))})")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{full}: expected a section (mapping), got {value!r}")
            kwargs[key] = build(hint, value, f"{full}.")  # type: ignore[arg-type]
        else:
            kwargs[key] = coerce(value, hint, full)
    try:
        return cls(**kwargs)
    except SpecError as exc:  # a section made of TRACE's settings checks them when it is built
        raise ConfigError(f"{prefix}{exc.key}: {exc.why}") from None


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_override(item: str) -> dict[str, Any]:
    import yaml

    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected section.key=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {item!r}: expected section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    tree: dict[str, Any] = {parts[-1]: value}
    for p in reversed(parts[:-1]):
        tree = {p: tree}
    return tree


def read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a mapping of sections")
    return data
