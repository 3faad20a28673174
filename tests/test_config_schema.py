"""Configs declared once: the schema file is what the dataclasses generate, every line of it; each section
has exactly its dataclass's settings; and the generic check enforces each declared type, bound and choice."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import yaml

from balagg import config_schema
from balagg.campaign import Campaign, campaign_schema
from balagg.config_schema import Checked, properties, setting


def test_the_checked_in_schema_is_what_the_config_dataclasses_generate(tmp_path):
    """Edit the dataclass (or a registry), then run python -m balagg.config_schema."""
    assert config_schema.SCHEMA_FILE.read_text() == config_schema.render(campaign_schema())
    assert config_schema.main(["--check"]) == 0
    stale = tmp_path / "schema.yaml"
    stale.write_text(config_schema.SCHEMA_FILE.read_text().replace("minimum: 0", "minimum: 1", 1))
    assert config_schema.main(["--check", "--schema", str(stale)]) == 1


def test_the_file_reads_back_as_the_schema_the_loader_validates_with():
    text = config_schema.SCHEMA_FILE.read_text()
    assert yaml.safe_load(text) == campaign_schema()
    assert all(line.startswith("#") for line in text.splitlines()[:3])  # the header says how it is made


def _section(schema: dict, *path: str) -> dict:
    node = schema
    for key in path:
        node = node[key]
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


OVERRIDES = False  # a section whose keys override another's carries no defaults


@pytest.mark.parametrize(("path", "source", "defaults"), [
    (("properties", "eval"), "balagg.settings:EvalDefaults", True),
    (("properties", "tinyworld"), "balagg.settings:TinyWorldDefaults", True),
    (("properties", "analysis"), "balagg.settings:AnalysisDefaults", True),
    (("properties", "data"), "balagg.settings:DataDefaults", True),
    (("properties", "train"), "balagg.train.config:CellConfig", OVERRIDES),
    (("properties", "models", "additionalProperties", "properties", "train"), "balagg.train.config:CellConfig",
     OVERRIDES),
    (("properties", "models", "additionalProperties", "properties", "train_resources"),
     "balagg.grid.resources:Resources", True),
    (("properties", "checkpoints", "additionalProperties", "properties", "generate_resources"),
     "balagg.grid.resources:Resources", True),
    (("properties", "plan"), "balagg.plan:Rates", True),
    (("properties", "plan", "properties", "models", "additionalProperties"), "balagg.plan:Rates", OVERRIDES),
])
def test_each_section_holds_its_dataclasses_settings(path, source, defaults):
    """A field added to a section's dataclass (a resource, a plan rate, a training setting) is in the
    schema, typed and bounded as declared, with no other change."""
    import importlib

    module, _, name = source.partition(":")
    config_class = getattr(importlib.import_module(module), name)
    section = _section(campaign_schema(), *path)
    declared = [field.name for field in config_schema.schema_fields(config_class)]
    assert list(section["properties"])[:len(declared)] == declared
    assert section["additionalProperties"] is False
    expected = properties(config_class, defaults=defaults)
    assert {key: section["properties"][key] for key in declared} == expected


def test_the_registries_give_the_enums_and_the_benchmark_keys():
    from balagg.aggregation.rules import ALIASES, RULES
    from balagg.benchmarks import BENCHMARKS, TRAINING_SETS
    from balagg.tinyworld.regimes import REGIMES

    schema = campaign_schema()["properties"]
    assert set(schema["aggregators"]["items"]["enum"]) == set(RULES) | set(ALIASES)  # verl names accepted
    assert list(schema["benchmarks"]["properties"]) == list(BENCHMARKS)
    model = schema["models"]["additionalProperties"]["properties"]
    assert model["tinyworld_regime"]["enum"] == list(REGIMES)
    assert schema["datasets"]["additionalProperties"]["properties"]["loader"]["enum"] == list(TRAINING_SETS)


@dataclass
class Example(Checked):
    count: int = setting(3, "how many", minimum=1)
    share: float = setting(0.5, exclusive_minimum=0, maximum=1)
    label: str | None = setting(None, "a name")
    mode: str = setting("a", choices=("a", "b"))
    fixed: int = setting(8, const=8)
    steps: list[int] = setting(default_factory=list, minimum=0, unique=True)
    hidden: bool = setting(False, in_schema=False)


def test_a_dataclass_renders_as_json_schema_properties():
    assert properties(Example) == {
        "count": {"type": "integer", "minimum": 1, "default": 3, "description": "how many"},
        "share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.5},
        "label": {"type": ["string", "null"], "default": None, "description": "a name"},
        "mode": {"enum": ["a", "b"], "default": "a"},
        "fixed": {"const": 8, "default": 8},
        "steps": {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True, "default": []},
    }
    assert properties(Example, defaults=False)["count"] == {"type": "integer", "minimum": 1, "description": "how many"}


@pytest.mark.parametrize(("change", "message"), [
    ({"count": 0}, "count must be >= 1, got 0"),
    ({"share": 0}, "share must be > 0, got 0"),
    ({"share": 1.5}, "share must be <= 1, got 1.5"),
    ({"mode": "c"}, "mode must be one of a, b, got 'c'"),
    ({"fixed": 4}, "fixed must be 8, got 4"),
    ({"steps": [2, -1]}, r"steps\[1\] must be >= 0, got -1"),
    ({"steps": [2, 2]}, "steps lists an item twice"),
    ({"count": "3"}, "count='3' has the wrong type"),
    ({"count": True}, "count=True has the wrong type"),
])
def test_every_declared_bound_and_choice_is_enforced(change, message):
    with pytest.raises(ValueError, match=f"^config: {message}"):
        Example(**change)
    Example()  # the defaults pass


@pytest.mark.parametrize("config_class", ["balagg.train.config:CellConfig", "balagg.settings:EvalDefaults",
                                          "balagg.settings:TinyWorldDefaults", "balagg.grid.resources:Resources",
                                          "balagg.plan:Rates", "balagg.evaluation.generation.requests:GenerationConfig",
                                          "balagg.evaluation.scoring.config:ScoreConfig"])
def test_every_config_dataclass_checks_its_declared_bounds(config_class):
    """The generic check, not a hand-kept list: each field declared with a minimum refuses a value below it."""
    import importlib

    module, _, name = config_class.partition(":")
    cls = getattr(importlib.import_module(module), name)
    required = {"model": "m", "train_files": ["t.jsonl"], "aggregator": "seq-agg", "seed": 0}
    base = {key: value for key, value in required.items() if key in {f.name for f in dataclasses.fields(cls)}}
    checked = 0
    for field in dataclasses.fields(cls):
        meta = field.metadata
        bound = meta.get("minimum", meta.get("exclusive_minimum"))
        if bound is None or "list" in str(field.type) or "tuple" in str(field.type):
            continue
        below = bound - 1 if "minimum" in meta else bound
        if "int" in str(field.type):
            below = int(below)
        with pytest.raises(ValueError, match=f"{field.name} must be"):
            cls(**(base | {field.name: below}))
        checked += 1
    assert checked >= 3


def test_a_setting_carried_by_two_dataclasses_is_declared_once():
    """setting_of: the field is the owner's again (default and constraints), with its own help and flags."""
    from balagg.config_schema import setting_of

    @dataclass
    class Carrier(Checked):
        config_name = "carrier"
        share: float = setting_of(Example, "share", "the example's share", aliases=("--part",))

    field = dataclasses.fields(Carrier)[0]
    assert Carrier().share == 0.5
    assert dict(field.metadata) == {**dataclasses.fields(Example)[1].metadata, "help": "the example's share",
                                    "aliases": ("--part",)}
    with pytest.raises(ValueError, match="share must be <= 1"):
        Carrier(share=1.5)


def test_the_cell_config_refuses_what_only_the_schema_refused_before():
    """A cell.json written by hand meets the declared bounds too (top_p, learning_rate, scale_rewards)."""
    from balagg.train.config import CellConfig

    base = {"model": "m", "train_files": ["t.jsonl"], "aggregator": "seq-agg", "seed": 0}
    for change, message in [({"top_p": 1.5}, "top_p must be <= 1"), ({"learning_rate": 0}, "learning_rate must be > 0"),
                            ({"scale_rewards": "bogus"}, "scale_rewards must be one of group, batch, none")]:
        with pytest.raises(ValueError, match=message):
            CellConfig.from_dict(base | change)


def test_eval_every_defaults_to_what_its_minimum_allows():
    from balagg.train.config import CellConfig

    field = CellConfig.__dataclass_fields__["eval_every"]
    assert field.default >= field.metadata["minimum"]
    assert CellConfig(model="m", train_files=["t.jsonl"], aggregator="seq-agg", seed=0).eval_every == field.default


def test_campaign_fields_are_its_top_level_keys():
    keys = {field.name for field in dataclasses.fields(Campaign)} - {"config", "layers"}  # the loaded state
    assert keys == set(campaign_schema()["properties"])
    assert campaign_schema()["required"] == ["campaign", "benchmarks"]
