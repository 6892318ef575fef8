"""The base of every typed config (conf/schema.py and the entry points' schemas): immutability once validated, and
the one way a bad field is reported (its dotted name, then what was expected)."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any


class _Frozen:
    """Mixin: attribute assignment raises once `freeze()` has run (Hydra needs mutable dataclasses)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen", False):
            raise AttributeError(f"config is immutable after validation: cannot set {name!r}")
        super().__setattr__(name, value)


def freeze(obj: Any) -> Any:
    """Recursively make a validated config immutable; returns it."""
    if is_dataclass(obj) and isinstance(obj, _Frozen):
        for f in fields(obj):
            freeze(getattr(obj, f.name))
        object.__setattr__(obj, "_frozen", True)
    elif isinstance(obj, list):
        for item in obj:
            freeze(item)
    return obj


class ConfigError(ValueError):
    """A bad configuration value or file, a user error: its message is `<field>: <what was expected>` on one line.
    The entry points print it as such, without a traceback, and exit with code 2 (conf/cli.py)."""


def _require(cond: bool, field_name: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{field_name}: {msg}")
