"""Config dataclasses as the one declaration of their settings.

:func:`setting` declares a field with its help, bounds and choices (TRL's ``metadata={"help": ...}``).
From those declarations this module derives everything else about a setting:

- :func:`check_settings`: every field's type, bounds and choices, checked when an instance is made (the
  dataclass's ``__post_init__`` calls it, or inherits it from :class:`Checked`); ``__post_init__`` itself
  keeps only relations between fields, as TRL's ``GRPOConfig`` does;
- :func:`document`: the JSON schema of a config dataclass, whole (nested dataclasses, mappings of them,
  lists, a mapping of some of another dataclass's settings: :class:`Overrides`);
- ``python -m balagg.config_schema``: writes ``workflow/schemas/config.schema.yaml``, the JSON schema of a
  campaign config (:class:`balagg.campaign.Campaign`), every line of it generated (``--check``: exit 1 when
  the file differs from what would be written). The loader (:func:`balagg.campaign.load`) validates with
  the same schema, made in memory; the file is its readable copy for users, editors and Snakemake.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
"""The campaign schema as a file (written by ``python -m balagg.config_schema``)."""

_BOUNDS = {"minimum": "minimum", "exclusive_minimum": "exclusiveMinimum", "maximum": "maximum"}


def setting(default: Any = dataclasses.MISSING, help: str = "", *,  # noqa: A002 (TRL's and argparse's name)
            default_factory: Any = dataclasses.MISSING, choices: typing.Sequence[Any] | None = None,
            const: Any = dataclasses.MISSING, minimum: float | None = None, exclusive_minimum: float | None = None,
            maximum: float | None = None, pattern: str | None = None, min_length: int | None = None,
            min_items: int | None = None, unique: bool = False, optional: bool = False,
            aliases: tuple[str, ...] = (), in_schema: bool = True, in_flags: bool = True) -> Any:
    """A dataclass field with ``metadata`` describing it (TRL style: ``metadata={"help": ...}``).

    ``help`` becomes the schema's ``description`` and the command-line flag's help. Constraints apply to
    the value, to each item of a list and to each value of a mapping: ``choices`` (the schema's ``enum``,
    the flag's choices; for a mapping, the keys it may have), ``const`` (the one value accepted),
    ``minimum``, ``exclusive_minimum`` and ``maximum``, ``pattern`` (a regular expression a text, or a
    mapping's keys, must match whole) and ``min_length`` (of a text). ``min_items`` and ``unique``: of a
    list or mapping. ``optional``: a key a config may leave out (its value here None, no default in the
    schema: who reads it applies its own). ``aliases``: further flag names (:mod:`balagg.config_flags`);
    ``in_schema=False``: a field no config file sets (the workflow sets it, or it names the cell);
    ``in_flags=False``: a field no command-line flag sets (a value only code passes)."""
    metadata: dict[str, Any] = {"help": help, "in_schema": in_schema, "in_flags": in_flags}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if const is not dataclasses.MISSING:
        metadata["const"] = const
    metadata |= {key: value for key, value in (("minimum", minimum), ("exclusive_minimum", exclusive_minimum),
                                                ("maximum", maximum), ("pattern", pattern),
                                                ("min_length", min_length), ("min_items", min_items))
                 if value is not None}
    if unique:
        metadata["unique"] = True
    if optional:
        metadata["optional"] = True
    if aliases:
        metadata["aliases"] = aliases
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def setting_of(owner: type, name: str, help: str | None = None, **metadata: Any) -> Any:  # noqa: A002
    """A field that is ``owner``'s field ``name`` again: its default and its constraints, declared once where
    two dataclasses carry one setting (the eval section's sampling and ``generate``'s flags, the verifier's
    timeouts and ``score``'s). ``help`` and ``metadata`` (e.g. ``aliases=("--flag",)``) replace that field's."""
    field = next(field for field in dataclasses.fields(owner) if field.name == name)
    described = dict(field.metadata) | ({} if help is None else {"help": help}) | metadata
    return dataclasses.field(default=field.default, default_factory=field.default_factory, metadata=described)


@dataclass(frozen=True)
class Overrides:
    """``Annotated[dict, Overrides(SomeConfig, "name")]``: a mapping of some of ``SomeConfig``'s settings
    (those in its schema), each typed and bounded as ``SomeConfig`` declares it, without its defaults --
    a section whose keys override another's (``models.<name>.train`` over ``train``), where a filled-in
    default would override a value set there. ``name`` names it among the schema's ``$defs``."""

    config_class: type
    name: str


def field_default(field: dataclasses.Field) -> Any:
    """The default value of ``field`` (its factory's value for a ``default_factory``)."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def schema_fields(config_class: type) -> list[dataclasses.Field]:
    """The fields of ``config_class`` a config file may set (all but ``in_schema=False``)."""
    return [field for field in dataclasses.fields(config_class) if field.metadata.get("in_schema", True)]


def _hints(config_class: type) -> dict[str, Any]:
    return typing.get_type_hints(config_class, include_extras=True)


def _optional(hint: Any) -> tuple[Any, bool]:
    """``X`` of ``X | None`` and whether None is allowed."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        rest = [arg for arg in args if arg is not type(None)]
        if len(rest) != 1 or type(None) not in args:
            raise TypeError(f"{hint}: only X and X | None are config types")
        return rest[0], True
    return hint, False


def _overrides(hint: Any) -> Overrides | None:
    if typing.get_origin(hint) is Annotated:
        return next((extra for extra in hint.__metadata__ if isinstance(extra, Overrides)), None)
    return None


# ---- the generic check -------------------------------------------------------------------------------


def _matches(value: Any, hint: Any) -> bool:
    """Shallow runtime type check of a JSON-like value against a field annotation."""
    if _overrides(hint) is not None:
        return isinstance(value, Mapping)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, (tuple, list)) and all(_matches(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint)
        return isinstance(value, Mapping) and all(_matches(k, key) and _matches(v, item) for k, v in value.items())
    if hint is Any:
        return True
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return True  # a section as written (a mapping of overrides): its fields are checked by check_value
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    inner, nullable = _optional(hint)
    if _overrides(inner) is not None:
        name = "mapping"
    elif typing.get_origin(inner) in (list, tuple):
        name = f"list of {_type_name(typing.get_args(inner)[0])}"
    elif typing.get_origin(inner) is dict:
        name = f"mapping of {_type_name(typing.get_args(inner)[1])}"
    elif dataclasses.is_dataclass(inner):
        name = "mapping"
    else:
        name = {bool: "true or false", int: "an integer", float: "a number", str: "a text"}.get(inner, str(inner))
    return name + (" or null" if nullable else "")


def _bound_problem(value: Any, meta: Mapping[str, Any]) -> str | None:
    """What is wrong with one scalar ``value`` under the constraints ``meta``, or None."""
    if "const" in meta and value != meta["const"]:
        return f"must be {meta['const']!r}"
    if "choices" in meta and value not in meta["choices"]:
        return "must be one of " + ", ".join(map(str, meta["choices"]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in meta and value < meta["minimum"]:
            return f"must be >= {meta['minimum']}"
        if "exclusive_minimum" in meta and value <= meta["exclusive_minimum"]:
            return f"must be > {meta['exclusive_minimum']}"
        if "maximum" in meta and value > meta["maximum"]:
            return f"must be <= {meta['maximum']}"
    if isinstance(value, str):
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            return f"must match {meta['pattern']}"
        if "min_length" in meta and len(value) < meta["min_length"]:
            return "must not be empty" if meta["min_length"] == 1 else f"must have >= {meta['min_length']} characters"
    return None


def check_value(name: str, value: Any, hint: Any, meta: Mapping[str, Any]) -> str | None:
    """What is wrong with ``value`` of the field ``name`` (annotation ``hint``, metadata ``meta``): its
    type, then its bounds and choices (of each item of a list, of each key and value of a mapping); None
    if nothing is. The message starts with the field's name (and the item's key or index)."""
    if not _matches(value, hint):
        return f"{name}={value!r} has the wrong type; expected {_type_name(hint)}"
    inner, _ = _optional(hint)
    if value is None:
        return None
    overrides = _overrides(inner)
    if overrides is not None:
        problem = check_overrides(overrides.config_class, value)
        return f"{name}.{problem}" if problem else None
    origin = typing.get_origin(inner)
    if origin in (list, tuple, dict):
        items = list(value.items()) if origin is dict else list(enumerate(value))
        if "min_items" in meta and len(items) < meta["min_items"]:
            return f"{name} needs at least {meta['min_items']} item(s)"
        if origin is dict:
            item_meta = {k: v for k, v in meta.items() if k not in ("choices", "pattern", "min_items")}
            for key in value:
                if "choices" in meta and key not in meta["choices"]:
                    return f"{name}.{key}: unknown key; known: {', '.join(meta['choices'])}"
                if "pattern" in meta and not re.fullmatch(meta["pattern"], str(key)):
                    return f"{name}.{key}: the name must match {meta['pattern']}"
        else:
            item_meta = {k: v for k, v in meta.items() if k not in ("min_items", "unique")}
            if meta.get("unique") and len(set(map(repr, value))) != len(value):
                return f"{name} lists an item twice: {value}"
        item_hint = typing.get_args(inner)[-1 if origin is dict else 0]
        for key, item in items:
            problem = check_value(f"{name}.{key}" if origin is dict else f"{name}[{key}]", item, item_hint, item_meta)
            if problem:
                return problem
        return None
    if dataclasses.is_dataclass(value):
        return None  # checked when it was made
    if dataclasses.is_dataclass(inner) and isinstance(value, Mapping):
        try:
            from_mapping(inner, value, name)
        except ValueError as error:
            return str(error)
        return None
    problem = _bound_problem(value, meta)
    return f"{name} {problem}, got {value!r}" if problem else None


def check_settings(instance: Any, where: str) -> None:
    """ValueError ``"<where>: <problem>"`` for the first field of the dataclass ``instance`` whose type,
    bounds or choices its declaration (:func:`setting`) refuses."""
    hints = _hints(type(instance))
    for field in dataclasses.fields(instance):
        problem = check_value(field.name, getattr(instance, field.name), hints[field.name], field.metadata)
        if problem:
            raise ValueError(f"{where}: {problem}")


def check_overrides(config_class: type, values: Mapping[str, Any]) -> str | None:
    """What is wrong with ``values``, some settings of ``config_class`` (:class:`Overrides`): a key it does
    not declare in its schema, or a value its declaration refuses; None if nothing is."""
    fields = {field.name: field for field in schema_fields(config_class)}
    hints = _hints(config_class)
    for key, value in values.items():
        if key not in fields:
            return f"{key}: unknown key" + _did_you_mean(key, fields)
        problem = check_value(key, value, hints[key], fields[key].metadata)
        if problem:
            return problem
    return None


def _did_you_mean(key: str, known: typing.Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(str(key), list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class Checked:
    """A config dataclass whose fields are checked as declared when an instance is made
    (:func:`check_settings`); ``config_name`` names it in the message."""

    config_name: typing.ClassVar[str] = "config"

    def __post_init__(self) -> None:
        check_settings(self, self.config_name)


def from_mapping(config_class: type, data: Any, where: str) -> Any:
    """An instance of the dataclass ``config_class`` from a mapping (nested dataclasses, and mappings of
    them, made from their own mappings); ValueError naming ``where`` and the key for an unknown or
    missing key or a bad value."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(data).__name__}")
    fields = {field.name: field for field in dataclasses.fields(config_class) if field.init}
    hints = _hints(config_class)
    unknown = [key for key in data if key not in fields]
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key" + _did_you_mean(unknown[0], fields))
    missing = [name for name, field in fields.items() if name not in data and field.default is dataclasses.MISSING
               and field.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where}: {missing[0]} is required")
    values = {key: _typed(hints[key], value, f"{where}.{key}") for key, value in data.items()}
    return config_class(**values)


def _typed(hint: Any, value: Any, where: str) -> Any:
    inner, _ = _optional(hint)
    if value is None or _overrides(inner) is not None:
        return value
    if dataclasses.is_dataclass(inner):
        return from_mapping(inner, value, where)
    if typing.get_origin(inner) is dict and isinstance(value, Mapping):
        item = typing.get_args(inner)[1]
        if dataclasses.is_dataclass(item):
            return {key: from_mapping(item, entry, f"{where}.{key}") for key, entry in value.items()}
    return value


# ---- the JSON schema ---------------------------------------------------------------------------------


def json_type(hint: Any) -> str | list[str]:
    """The JSON-schema ``type`` of a scalar or list annotation (``X | None``: ``[X's type, "null"]``)."""
    inner, nullable = _optional(hint)
    if typing.get_origin(inner) in (list, tuple):
        name = "array"
    elif typing.get_origin(inner) is dict or dataclasses.is_dataclass(inner):
        name = "object"
    else:
        names = {bool: "boolean", int: "integer", float: "number", str: "string"}
        if inner not in names:
            raise TypeError(f"no JSON type for {hint}")
        name = names[inner]
    return [name, "null"] if nullable else name


def _constraints(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-schema keywords of a scalar's constraints."""
    spec: dict[str, Any] = {}
    if "const" in meta:
        spec["const"] = meta["const"]
    elif "choices" in meta:
        spec["enum"] = list(meta["choices"])
    spec |= {word: meta[key] for key, word in _BOUNDS.items() if key in meta}
    if "pattern" in meta:
        spec["pattern"] = f"^{meta['pattern']}$"
    if "min_length" in meta:
        spec["minLength"] = meta["min_length"]
    return spec


class _Document:
    """Renders config dataclasses as JSON schema; a dataclass or :class:`Overrides` met more than once is
    rendered once, under ``$defs``."""

    def __init__(self, root: type):
        self.uses: dict[str, int] = {}
        self.defs: dict[str, dict] = {}
        self._count(root)

    def _count(self, hint: Any) -> None:
        inner, _ = _optional(hint)
        overrides = _overrides(inner)
        if overrides is not None:
            self.uses[overrides.name] = self.uses.get(overrides.name, 0) + 1
        elif dataclasses.is_dataclass(inner):
            name = def_name(inner)
            self.uses[name] = self.uses.get(name, 0) + 1
            if self.uses[name] == 1:
                hints = _hints(inner)
                for field in schema_fields(inner):
                    self._count(hints[field.name])
        elif typing.get_origin(inner) in (list, dict):
            self._count(typing.get_args(inner)[-1])

    def object(self, config_class: type, *, defaults: bool = True) -> dict[str, Any]:
        """``config_class`` as a JSON-schema object: its properties, the keys it requires, nothing else."""
        hints = _hints(config_class)
        spec: dict[str, Any] = {"type": "object", "additionalProperties": False}
        doc = _summary(config_class)
        if doc:
            spec["description"] = doc
        spec["properties"] = {field.name: self.property(field, hints[field.name], defaults=defaults)
                              for field in schema_fields(config_class)}
        required = [field.name for field in schema_fields(config_class)
                    if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING]
        if required and defaults:
            spec["required"] = required
        return spec

    def _reference(self, name: str, make) -> dict[str, Any]:
        if self.uses.get(name, 0) < 2:
            return make()
        if name not in self.defs:
            self.defs[name] = {}  # reserved first: a definition may refer to itself
            self.defs[name] = make()
        return {"$ref": f"#/$defs/{name}"}

    def value(self, hint: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
        """The schema of a value of type ``hint`` under the constraints ``meta``."""
        inner, nullable = _optional(hint)
        overrides = _overrides(inner)
        if overrides is not None:
            spec = self._reference(overrides.name, lambda: self.object(overrides.config_class, defaults=False))
        elif dataclasses.is_dataclass(inner):
            spec = self._reference(def_name(inner), lambda: self.object(inner))
        elif typing.get_origin(inner) in (list, tuple):
            item = {k: v for k, v in meta.items() if k not in ("min_items", "unique")}
            spec = {"type": "array", "items": self.value(typing.get_args(inner)[0], item)}
            if "min_items" in meta:
                spec["minItems"] = meta["min_items"]
            if meta.get("unique"):
                spec["uniqueItems"] = True
        elif typing.get_origin(inner) is dict:
            item_hint = typing.get_args(inner)[1]
            item = {k: v for k, v in meta.items() if k not in ("choices", "pattern", "min_items")}
            spec = {"type": "object"}
            if "choices" in meta:  # the keys a mapping may have
                spec["properties"] = {key: self.value(item_hint, item) for key in meta["choices"]}
                spec["additionalProperties"] = False
            else:
                if "pattern" in meta:
                    spec["propertyNames"] = {"pattern": f"^{meta['pattern']}$"}
                spec["additionalProperties"] = self.value(item_hint, item)
            if "min_items" in meta:
                spec["minProperties"] = meta["min_items"]
        else:
            constraints = _constraints(meta)
            spec = constraints if ("enum" in constraints or "const" in constraints) else {
                "type": json_type(inner), **constraints}
        if nullable and not meta.get("optional") and "$ref" not in spec:
            if "type" in spec:
                spec["type"] = [spec["type"], "null"] if isinstance(spec["type"], str) else spec["type"]
            elif "enum" in spec:
                spec["enum"] = [*spec["enum"], None]
        return spec

    def property(self, field: dataclasses.Field, hint: Any, *, defaults: bool) -> dict[str, Any]:
        """One field as a property: its value's schema, its default (unless ``defaults`` is off or the key is
        optional) and its help as the description."""
        meta = field.metadata
        spec = dict(self.value(hint, meta))
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        if defaults and has_default and not meta.get("optional"):
            default = field_default(field)
            spec["default"] = {} if dataclasses.is_dataclass(default) else default
        if meta.get("help"):
            if "$ref" in spec:
                spec = {"$ref": spec["$ref"], **{k: v for k, v in spec.items() if k != "$ref"}}
            spec["description"] = meta["help"]
        return spec


def def_name(config_class: type) -> str:
    """A dataclass's name among the schema's ``$defs``: ``Resources`` -> ``resources``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", config_class.__name__).lower()


def _summary(config_class: type) -> str:
    """The first paragraph of a config dataclass's docstring, on one line."""
    doc = config_class.__doc__ or ""
    if doc.startswith(f"{config_class.__name__}("):  # dataclasses' generated signature: no docstring
        return ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def properties(config_class: type, *, defaults: bool = True) -> dict[str, dict[str, Any]]:
    """The JSON-schema properties of a config dataclass: one per field, except those declared with
    ``in_schema=False``; ``defaults=False`` leaves the defaults out (:class:`Overrides`)."""
    return _Document(config_class).object(config_class, defaults=defaults)["properties"]


def document(root: type) -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of a config file whose top level is the dataclass ``root`` (its
    docstring's first paragraph the description)."""
    rendering = _Document(root)
    schema: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema", **rendering.object(root)}
    if rendering.defs:
        schema["$defs"] = dict(sorted(rendering.defs.items()))
    return schema


# ---- the schema file ---------------------------------------------------------------------------------

HEADER = ("# The JSON schema of a campaign config, generated from its dataclasses (balagg.campaign.Campaign and the\n"
          "# sections it holds) by `python -m balagg.config_schema`; edit those, then rerun it. The loader\n"
          "# (balagg.campaign.load) validates with the same schema; relations between settings are checked there.\n")


def _flow(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=float("inf"),
                          allow_unicode=True).strip().removesuffix("\n...")


def _is_leaf(value: Any) -> bool:
    """A mapping shown on one line: no mapping inside it other than a short one of scalars."""
    if not isinstance(value, dict):
        return True
    return all(not isinstance(v, dict) or (all(not isinstance(x, (dict, list)) for x in v.values()) and len(v) <= 2)
               for v in value.values()) and not any(isinstance(v, list) and any(isinstance(x, dict) for x in v)
                                                   for v in value.values())


def _emit(value: dict, indent: str, lines: list[str]) -> None:
    for key, item in value.items():
        name = _flow(key) if not re.fullmatch(r"[$A-Za-z_][\w$.-]*", str(key)) else str(key)
        if isinstance(item, dict) and item and not (_is_leaf(item) and key not in ("properties", "$defs")
                                                    and len(_flow(item)) <= 100):
            lines.append(f"{indent}{name}:")
            _emit(item, indent + "  ", lines)
        else:
            lines.append(f"{indent}{name}: {_flow(item)}")


def render(schema: Mapping[str, Any]) -> str:
    """The schema as the YAML text of the file: nested mappings in block style, each short leaf on one line."""
    lines: list[str] = []
    _emit(dict(schema), "", lines)
    return HEADER + "\n".join(lines) + "\n"


def campaign_schema() -> dict[str, Any]:
    """The JSON schema of a campaign config (:class:`balagg.campaign.Campaign`)."""
    from balagg.campaign import campaign_schema as make

    return make()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m balagg.config_schema", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schema", type=Path, default=SCHEMA_FILE, help="the schema file (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args(argv)
    generated = render(campaign_schema())
    if args.check:
        if not args.schema.is_file() or args.schema.read_text() != generated:
            print(f"{args.schema} is not what the config dataclasses generate: run python -m balagg.config_schema",
                  file=sys.stderr)
            return 1
        return 0
    args.schema.write_text(generated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
