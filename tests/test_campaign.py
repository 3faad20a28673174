"""balagg.campaign: one way in for a campaign config -- merged as Snakemake merges it, validated, completed,
typed -- and every problem one line naming the file that holds the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from balagg.campaign import Campaign, load, resolve
from balagg.cli import main
from balagg.grid import Grid

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
SHIPPED = [["default"], ["smoke"], ["laboratory"], ["paper"], ["paper", "rehearsal"], ["evaluate"]]


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("names", SHIPPED, ids="+".join)
def test_shipped_configs_load_merged_as_snakemake_merges_them(names):
    from snakemake.utils import update_config

    paths = [CONFIGS / f"{name}.yaml" for name in names]
    campaign = load(paths)
    assert isinstance(campaign, Campaign) and campaign.campaign == campaign.config["campaign"]
    merged: dict = {}
    for path in paths:
        update_config(merged, yaml.safe_load(path.read_text()))  # Snakemake's own merge of --configfile files
    assert resolve(merged).config == campaign.config
    # every default is filled in: the sections' and each model's own
    assert campaign.config["eval"]["code_timeout_s"] == campaign.eval.code_timeout_s
    assert all("chat_template" in spec for spec in campaign.config["models"].values())
    assert {type(model).__name__ for model in campaign.models.values()} <= {"Model"}


def test_a_typo_in_an_overlay_names_the_one_file_that_has_the_key(tmp_path, capsys):
    overlay = write(tmp_path / "overlay.yaml", {"train": {"total_stpes": 8}})
    assert main(["plan", "--configfile", str(CONFIGS / "smoke.yaml"), str(overlay)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: config {overlay}: train.total_stpes: unknown key (did you mean total_steps?)")
    assert "smoke.yaml" not in err and err.count("\n") == 1
    # a bad value: the file that sets it last (it wins), not the one it overrides
    overlay.write_text("eval:\n  top_p: 1.5\n")
    assert main(["plan", "--configfile", str(CONFIGS / "smoke.yaml"), str(overlay)]) == 2
    assert capsys.readouterr().err.startswith(f"error: config {overlay}: eval.top_p: 1.5 is greater than")
    # a key no file sets: every file
    first = write(tmp_path / "first.yaml", {"campaign": "c", "checkpoints": {"m": {"path": "/m"}}})
    with pytest.raises(ValueError, match=f"^config {first}, {overlay}: benchmarks: required$"):
        load([first, overlay])


def test_verl_names_are_accepted_where_a_config_names_rules(tmp_path, capsys):
    """README: verl's loss_agg_mode names are aliases of the rules; the grid's axis is the canonical names."""
    overlay = write(tmp_path / "verl.yaml", {"aggregators": ["seq-mean-token-mean", "token-mean"]})
    campaign = load([CONFIGS / "smoke.yaml", overlay])
    assert campaign.aggregators == campaign.config["aggregators"] == ["seq-agg", "token-agg"]
    assert {cell.aggregator for cell in Grid(campaign).cells} == {"seq-agg", "token-agg"}
    assert main(["plan", "--configfile", str(CONFIGS / "smoke.yaml"), str(overlay)]) == 0
    assert "tiny-s/arith-long/token-agg/seed0" in capsys.readouterr().out
    twice = write(tmp_path / "twice.yaml", {"aggregators": ["seq-agg", "seq-mean-token-mean"]})
    with pytest.raises(ValueError, match=f"^config {twice}: aggregators: .* name one rule twice"):
        load([CONFIGS / "smoke.yaml", twice])


def test_a_campaign_without_aggregators_needs_no_training_settings(tmp_path, capsys):
    """Evaluation only: a train section may set the prompt length (evaluation cuts prompts as training
    does) without placeholder total_steps / eval_every."""
    overlay = write(tmp_path / "prompt.yaml", {"train": {"max_prompt_length": 512}})
    campaign = load([CONFIGS / "evaluate.yaml", overlay])
    assert campaign.train == {"max_prompt_length": 512} and not campaign.aggregators
    assert main(["plan", "--configfile", str(CONFIGS / "evaluate.yaml"), str(overlay)]) == 0
    assert "external checkpoint" in capsys.readouterr().out


def test_a_grid_states_how_long_it_trains_and_how_often_it_evaluates(tmp_path):
    smoke = yaml.safe_load((CONFIGS / "smoke.yaml").read_text())
    del smoke["train"]["eval_every"]
    path = write(tmp_path / "grid.yaml", smoke)
    with pytest.raises(ValueError, match=f"^config {path}: train.eval_every: a grid"):
        load([path])
    smoke["models"]["tiny-s"]["train"] = {"eval_every": 2}  # the model's own completes the section
    assert load([write(path, smoke)]).models["tiny-s"].train == {"eval_every": 2}
    smoke["train"]["eval_every"] = 0
    smoke["models"]["tiny-s"].pop("train")
    with pytest.raises(ValueError, match="train.eval_every: a grid evaluates its trained checkpoints: must be >= 1"):
        load([write(path, smoke)])


@pytest.mark.parametrize(("change", "message"), [
    ({"aggregators": [], "checkpoints": {}}, "nothing to run: give aggregators"),
    ({"checkpoints": {"tiny-s": {"path": "/x"}}}, "checkpoints.tiny-s: the name is taken by a model of the grid"),
    ({"checkpoints": {"analysis": {"path": "/x"}}}, "checkpoints.analysis: the name is taken by a campaign folder"),
    ({"plan": {"models": {"nope": {}}}}, "plan.models.nope: not a model of the config"),
    ({"datasets": {}}, "datasets: a grid .* needs at least one entry"),
    ({"models": {"bad name": {"path": "tinyworld"}}}, r"models.bad name: the name must match \^\[A-Za-z0-9\]"),
    ({"seeds": [0, "x"]}, "seeds.1: 'x' is not of type 'integer'"),
    ({"train_retries": 2.0}, "train_retries: 2.0 is not of type 'integer'"),  # an int, named by its key
    ({"models": {"tiny-s": {"path": "tinyworld", "tinyworld_size": "tiny-q"}}},
     "models.tiny-s.tinyworld_size: 'tiny-q' is not one of"),
    ({"models": {"small": {"path": "tinyworld"}}},
     "models.small.tinyworld_size: a tiny-world model whose name is not a size needs one"),
    ({"models": {"tiny-s": {"path": ""}}}, "models.tiny-s.path: '' should be non-empty"),
    ({"train": {"total_steps": 4, "eval_every": 2, "answer_format": "boxed"}},
     "train.answer_format: not a train setting: the model's models.<name>.answer_format sets it, for training and "
     "evaluation alike"),
    ({"models": {"tiny-s": {"path": "tinyworld", "train": {"prompt_template": "{problem}"}}}},
     "models.tiny-s.train.prompt_template: not a train setting: the model's models.<name>.math_template sets it"),
    ({"trian": {}}, r"trian: unknown key \(did you mean train\?\)"),
    ({"plan": {"bench_problems": {"math-500": 5}}}, r"plan.bench_problems.math-500: unknown key \(did you mean math500\?\)"),
])
def test_relations_and_names_are_one_line_naming_the_file(tmp_path, change, message):
    config = yaml.safe_load((CONFIGS / "smoke.yaml").read_text()) | change
    path = write(tmp_path / "changed.yaml", config)
    with pytest.raises(ValueError, match=f"^config {path}: {message}") as error:
        load([path])
    assert "\n" not in str(error.value)


def test_the_grid_takes_a_loaded_campaign():
    with pytest.raises(TypeError, match="loaded campaign"):
        Grid(yaml.safe_load((CONFIGS / "smoke.yaml").read_text()))
    # a model whose train section is all defaults still has its checkpoint steps (no KeyError)
    campaign = load([CONFIGS / "smoke.yaml"])
    assert Grid(campaign).checkpoint_steps("tiny-s") == [0, 2, 4]


def test_a_missing_checkpoint_path_does_not_exist_and_names_its_config_file(tmp_path):
    from balagg.grid import checks

    overlay = write(tmp_path / "mine.yaml", {"checkpoints": {"mine": {"path": str(tmp_path / "absent")}}})
    grid = Grid(load([CONFIGS / "smoke.yaml", overlay]))
    with pytest.raises(ValueError) as error:
        checks.resolve_externals(grid, tmp_path / "hub", offline=True, verl_in_jobs=False)
    assert str(error.value) == (f"config {overlay}: checkpoints.mine: path {tmp_path / 'absent'} does not exist "
                                "(nor is it a hub id, org/name)")
