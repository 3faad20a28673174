"""Command-line flags generated from a config dataclass (as transformers' ``HfArgumentParser``), at both
ends: :func:`add_config_arguments` declares one flag per field, ``--field-name``, with the field's default,
its type from the annotation and its help, choices and further names (``aliases``) from the metadata
:func:`balagg.config_schema.setting` declares; :func:`config_flags` writes settings as those flags (the
workflow's command lines), which :func:`config_from_args` reads back into the dataclass."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import types
import typing
from collections.abc import Mapping
from typing import Any

from balagg.config_schema import field_default

_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def to_bool(text: str) -> bool:
    """A flag's boolean value: true/yes/1 or false/no/0 (any case)."""
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def to_ints(text: str) -> tuple[int, ...]:
    """A flag's list of integers, comma-separated: ``1,2,4``."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _value_type(hint: Any) -> Any:
    """The type a flag's text converts to: ``X`` of ``X`` and ``X | None``; ``tuple[int, ...]``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) is tuple and typing.get_args(hint) == (int, ...):
        return tuple
    if hint not in (bool, int, float, str):
        raise TypeError(f"no command-line flag for a field of type {hint}")
    return hint


def flag_fields(config_class: type) -> list[dataclasses.Field]:
    """The fields of ``config_class`` that have a flag (all but ``in_flags=False``)."""
    return [field for field in dataclasses.fields(config_class) if field.metadata.get("in_flags", True)]


def flag_name(field_name: str) -> str:
    """``--field-name`` of a field."""
    return "--" + field_name.replace("_", "-")


def add_config_arguments(parser: argparse.ArgumentParser, config_class: type) -> None:
    """Add one flag per field of ``config_class`` to ``parser``. A boolean flag takes true or false, or
    nothing (true); ``X | None`` fields default to None and take an ``X``; a ``tuple[int, ...]`` takes
    comma-separated integers."""
    hints = typing.get_type_hints(config_class)
    for field in flag_fields(config_class):
        meta, value_type = field.metadata, _value_type(hints[field.name])
        kwargs: dict[str, Any] = {"dest": field.name, "default": field_default(field), "help": meta.get("help") or None}
        if value_type is bool:
            kwargs |= {"type": to_bool, "nargs": "?", "const": True, "metavar": "true|false"}
        elif value_type is tuple:
            kwargs |= {"type": to_ints, "metavar": "K,K,..."}
        else:
            kwargs["type"] = value_type
        if "choices" in meta:
            kwargs["choices"] = meta["choices"]
        parser.add_argument(flag_name(field.name), *meta.get("aliases", ()), **kwargs)


def config_from_args(config_class: type, args: argparse.Namespace, **values: Any) -> Any:
    """An instance of ``config_class`` from the parsed flags of :func:`add_config_arguments`; ``values``
    replace some (a value the command resolves further, such as a template read from a file)."""
    return config_class(**{field.name: getattr(args, field.name) for field in flag_fields(config_class)} | values)


def config_flags(config_class: type, settings: Mapping[str, Any]) -> str:
    """``settings`` (some fields of ``config_class``, checked by making an instance of it) as the flags
    :func:`add_config_arguments` reads, in the dataclass's field order, quoted for a shell: a boolean as
    ``true``/``false``, a list of integers comma-separated, anything else as written; None (unset)
    is left out. A key that is not a flag of ``config_class`` is a ValueError."""
    fields = flag_fields(config_class)
    unknown = sorted(set(settings) - {field.name for field in fields})
    if unknown:
        raise ValueError(f"{config_class.__name__} has no flag for {', '.join(unknown)}")
    config_class(**settings)
    words = []
    for field in fields:
        value = settings.get(field.name)
        if field.name not in settings or value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            text = ",".join(str(item) for item in value)
        else:
            text = str(value)
        words += [flag_name(field.name), text]
    return " ".join(shlex.quote(word) for word in words)
