"""Config dataclasses as the one declaration of their settings: :func:`setting` declares a field with its
help and constraints, :func:`properties` renders a dataclass's fields as JSON-schema properties, and
``python -m balagg.config_schema`` writes them into the sections of ``workflow/schemas/config.schema.yaml``
that are generated (``--check``: exit 1 when the file differs from what would be written).

A generated section is the block under a line ``properties:  # generated from <section> ...``
(:data:`SECTIONS`), a generated enum a line ``enum: [...]  # generated from <name> ...`` (:data:`ENUMS`);
every other line of the schema file is written by hand. Snakemake validates the campaign config against that file,
so it is checked in; ``tests/test_config_schema.py`` checks it is what this module writes.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"

_BOUNDS = {"minimum": "minimum", "exclusive_minimum": "exclusiveMinimum", "maximum": "maximum"}


def setting(default: Any = dataclasses.MISSING, help: str = "", *,  # noqa: A002 (TRL's and argparse's name)
            default_factory: Any = dataclasses.MISSING, choices: typing.Sequence[Any] | None = None,
            const: Any = dataclasses.MISSING, minimum: float | None = None, exclusive_minimum: float | None = None,
            maximum: float | None = None, aliases: tuple[str, ...] = (), in_schema: bool = True) -> Any:
    """A dataclass field with ``metadata`` describing it (TRL style: ``metadata={"help": ...}``).

    ``help`` becomes the schema's ``description`` and the command-line flag's help; ``choices`` the
    schema's ``enum`` (in place of its type) and the flag's choices; ``const`` the one value the schema
    accepts; ``minimum``, ``exclusive_minimum`` and ``maximum`` the schema's bounds (the dataclass checks
    its own values in ``__post_init__``); ``aliases`` further flag names (:mod:`balagg.config_flags`);
    ``in_schema=False`` leaves the field out of the schema section (a key the workflow sets itself, or
    that a campaign config may not set)."""
    metadata: dict[str, Any] = {"help": help, "in_schema": in_schema}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if const is not dataclasses.MISSING:
        metadata["const"] = const
    metadata |= {key: value for key, value in (("minimum", minimum), ("exclusive_minimum", exclusive_minimum),
                                                ("maximum", maximum)) if value is not None}
    if aliases:
        metadata["aliases"] = aliases
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def field_default(field: dataclasses.Field) -> Any:
    """The default value of ``field`` (its factory's value for a ``default_factory``)."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def json_type(hint: Any) -> str | list[str]:
    """The JSON-schema ``type`` of a field annotation (``X | None``: ``[X's type, "null"]``)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        types_ = [json_type(arg) for arg in args if arg is not type(None)]
        if len(types_) != 1 or type(None) not in args:
            raise TypeError(f"no JSON type for {hint}: only X and X | None are rendered")
        return [types_[0], "null"]
    if origin is list:
        return "array"
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint not in names:
        raise TypeError(f"no JSON type for {hint}")
    return names[hint]


def field_schema(field: dataclasses.Field, hint: Any, *, default: bool) -> dict[str, Any]:
    """The JSON-schema property of one field: ``const`` or ``enum`` (from ``choices``) in place of its
    type, bounds, the default (when ``default``) and its help as the description."""
    meta = field.metadata
    if "const" in meta:
        spec: dict[str, Any] = {"const": meta["const"]}
    elif "choices" in meta:
        spec = {"enum": list(meta["choices"])}
    else:
        spec = {"type": json_type(hint)}
    spec |= {word: meta[key] for key, word in _BOUNDS.items() if key in meta}
    if default:
        spec["default"] = field_default(field)
    if meta.get("help"):
        spec["description"] = meta["help"]
    return spec


def properties(config_class: type, *, defaults: bool = True) -> dict[str, dict[str, Any]]:
    """The JSON-schema properties of a config dataclass: one per field, except those declared with
    ``in_schema=False``; ``defaults=False`` leaves the defaults out (a section whose keys override
    another's, where a filled-in default would override a value set there)."""
    hints = typing.get_type_hints(config_class)
    return {field.name: field_schema(field, hints[field.name], default=defaults)
            for field in dataclasses.fields(config_class) if field.metadata.get("in_schema", True)}


@dataclass(frozen=True)
class Section:
    """A generated section of the schema file: the dataclass (``module:Class``) and whether its
    defaults are written."""

    source: str
    defaults: bool = True

    def config_class(self) -> type:
        module, _, name = self.source.partition(":")
        return getattr(importlib.import_module(module), name)


SECTIONS: dict[str, Section] = {
    # no defaults: models.<name>.train is typed by this section, and a filled-in default there would
    # override the campaign's train value; CellConfig fills them in
    "train": Section("balagg.train.config:CellConfig", defaults=False),
    "eval": Section("balagg.settings:EvalDefaults"),
    "tinyworld": Section("balagg.settings:TinyWorldDefaults"),
    "analysis": Section("balagg.settings:AnalysisDefaults"),
    "data": Section("balagg.settings:DataDefaults"),
    "resources": Section("balagg.grid.resources:Resources"),
}
"""The generated sections, by the name their marker line gives."""

ENUMS: dict[str, str] = {"aggregators": "balagg.aggregators:RULES", "answer_formats": "balagg.prompts:ANSWER_FORMATS"}
"""The generated enums (``module:NAME`` of a tuple of names), by the name their marker line gives: the
grid's aggregation rules are those of the registry, a model's answer format one of those the prompts
and the reward know."""

_MARKER = re.compile(r"^(?P<indent> *)properties:  # generated from (?P<section>\w+)\b.*$")
_ENUM_MARKER = re.compile(r"^(?P<indent> *)enum: .*  # generated from (?P<name>\w+)\b.*$")


def marker(section: str) -> str:
    """The comment that marks ``section``'s generated properties in the schema file."""
    return (f"# generated from {section} ({SECTIONS[section].source}) by python -m balagg.config_schema; "
            "edit the dataclass")


def render(section: str, indent: str) -> list[str]:
    """The lines of ``section``'s generated properties, one per property (flow style), each indented by
    ``indent`` plus two spaces."""
    import yaml

    spec = SECTIONS[section]
    props = properties(spec.config_class(), defaults=spec.defaults)
    return [f"{indent}  " + yaml.safe_dump({name: prop}, default_flow_style=True, sort_keys=False, width=float("inf"),
                                           allow_unicode=True).strip()[1:-1]
            for name, prop in props.items()]


def render_enum(name: str, indent: str) -> str:
    """The line of the generated enum ``name``."""
    import yaml

    module, _, attribute = ENUMS[name].partition(":")
    values = list(getattr(importlib.import_module(module), attribute))
    flow = yaml.safe_dump(values, default_flow_style=True, width=float("inf")).strip()
    return f"{indent}enum: {flow}  # generated from {name} ({ENUMS[name]}) by python -m balagg.config_schema"


def generate(text: str) -> str:
    """``text`` (the schema file) with every generated section and enum rewritten from its source; a
    section or enum of :data:`SECTIONS` / :data:`ENUMS` whose marker line is missing is a ValueError (its
    block would otherwise pass for hand-written)."""
    lines, out, i = text.splitlines(), [], 0
    found: set[str] = set()
    while i < len(lines):
        match, enum = _MARKER.match(lines[i]), _ENUM_MARKER.match(lines[i])
        i += 1
        if enum:
            if enum["name"] not in ENUMS:
                raise ValueError(f"schema file: no generated enum {enum['name']!r}; known: {', '.join(ENUMS)}")
            out.append(render_enum(enum["name"], enum["indent"]))
            found.add(enum["name"])
            continue
        if not match:
            out.append(lines[i - 1])
            continue
        indent, section = match["indent"], match["section"]
        if section not in SECTIONS:
            raise ValueError(f"schema file: no generated section {section!r}; known: {', '.join(SECTIONS)}")
        out += [f"{indent}properties:  {marker(section)}", *render(section, indent)]
        found.add(section)
        while i < len(lines) and (len(lines[i]) - len(lines[i].lstrip()) > len(indent)):
            i += 1  # the block's old lines
    missing = sorted((set(SECTIONS) | set(ENUMS)) - found)
    if missing:
        raise ValueError(f"schema file: no '# generated from' marker for {', '.join(missing)}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m balagg.config_schema", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schema", type=Path, default=SCHEMA_FILE, help="the schema file (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args(argv)
    text = args.schema.read_text()
    generated = generate(text)
    if args.check:
        if generated != text:
            print(f"{args.schema} is not what the config dataclasses generate: run python -m balagg.config_schema",
                  file=sys.stderr)
            return 1
        return 0
    args.schema.write_text(generated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
