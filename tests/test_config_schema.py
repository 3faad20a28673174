"""Configs declared once: the schema file's generated sections and enum are what the dataclasses and the
rule registry generate, and the rendering states their types, bounds, choices and defaults."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from balagg import config_schema
from balagg.config_schema import properties, setting


def test_the_checked_in_schema_is_what_the_config_dataclasses_generate():
    """Edit the dataclass (or balagg.aggregators), then run python -m balagg.config_schema."""
    text = config_schema.SCHEMA_FILE.read_text()
    assert config_schema.generate(text) == text


@pytest.mark.parametrize("marker", ["properties:  # generated from data", "enum: [boxed"])
def test_a_generated_part_whose_marker_is_gone_is_refused(marker):
    """Without its marker line a generated block would pass for hand-written and never be regenerated."""
    text = config_schema.SCHEMA_FILE.read_text()
    line = next(line for line in text.splitlines() if line.strip().startswith(marker))
    stripped = text.replace(line, line.split("  # generated from")[0])
    with pytest.raises(ValueError, match="no '# generated from' marker"):
        config_schema.generate(stripped)


@dataclass
class Example:
    count: int = setting(3, "how many", minimum=1)
    share: float = setting(0.5, exclusive_minimum=0, maximum=1)
    label: str | None = setting(None, "a name")
    mode: str = setting("a", choices=("a", "b"))
    fixed: int = setting(8, const=8)
    hidden: bool = setting(False, in_schema=False)


def test_a_dataclass_renders_as_json_schema_properties():
    assert properties(Example) == {
        "count": {"type": "integer", "minimum": 1, "default": 3, "description": "how many"},
        "share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.5},
        "label": {"type": ["string", "null"], "default": None, "description": "a name"},
        "mode": {"enum": ["a", "b"], "default": "a"},
        "fixed": {"const": 8, "default": 8},
    }
    assert properties(Example, defaults=False)["count"] == {"type": "integer", "minimum": 1, "description": "how many"}


def test_the_rendered_lines_read_back_as_the_properties():
    for section, spec in config_schema.SECTIONS.items():
        lines = config_schema.render(section, "")
        assert yaml.safe_load("\n".join(line[2:] for line in lines)) == properties(
            spec.config_class(), defaults=spec.defaults), section


def test_the_grid_offers_the_registrys_rules():
    from balagg.aggregators import RULES

    schema = yaml.safe_load(config_schema.SCHEMA_FILE.read_text())
    assert schema["properties"]["aggregators"]["items"]["enum"] == list(RULES)
