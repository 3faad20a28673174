"""Command-line flags generated from a config dataclass (as transformers' ``HfArgumentParser``): one flag
per field, ``--field-name``, with the field's default, its type from the annotation and its help, choices
and further names (``aliases``) from the metadata :func:`balagg.config_schema.setting` declares."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
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


def _value_type(hint: Any) -> Any:
    """The type a flag's text converts to: ``X`` of ``X`` and ``X | None``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if hint not in (bool, int, float, str):
        raise TypeError(f"no command-line flag for a field of type {hint}")
    return hint


def add_config_arguments(parser: argparse.ArgumentParser, config_class: type) -> None:
    """Add one flag per field of ``config_class`` to ``parser``. A boolean flag takes true or false, or
    nothing (true); ``X | None`` fields default to None and take an ``X``."""
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        meta, value_type = field.metadata, _value_type(hints[field.name])
        kwargs: dict[str, Any] = {"dest": field.name, "default": field_default(field), "help": meta.get("help") or None}
        if value_type is bool:
            kwargs |= {"type": to_bool, "nargs": "?", "const": True, "metavar": "true|false"}
        else:
            kwargs["type"] = value_type
        if "choices" in meta:
            kwargs["choices"] = meta["choices"]
        parser.add_argument(f"--{field.name.replace('_', '-')}", *meta.get("aliases", ()), **kwargs)


def config_from_args(config_class: type, args: argparse.Namespace, **values: Any) -> Any:
    """An instance of ``config_class`` from the parsed flags of :func:`add_config_arguments`; ``values``
    replace some (a value the command resolves further, such as a template read from a file)."""
    return config_class(**{field.name: getattr(args, field.name) for field in dataclasses.fields(config_class)}
                        | values)
