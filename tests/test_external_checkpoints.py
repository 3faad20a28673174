"""External checkpoints (balagg.external_checkpoints): what a `checkpoints:` entry resolves to, the one-line refusals
of bad entries, fetching a pinned hub revision, and Table 1's row of a checkpoint. No Snakemake here (that is
tests/test_workflow_external_checkpoints.py)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

from balagg import external_checkpoints  # noqa: E402
from balagg.benchmarks import MEAN
from balagg.cli import main  # noqa: E402
from balagg.layout import CURVE_FILE, EVAL_DIR, SCORES_FILE, eval_step_relpath
from balagg.tinyworld.hubcache import build_model, fill_hub_cache, put_snapshot, repo_folder  # noqa: E402

MODEL = "Qwen/Qwen3-1.7B"


def save_tiny_model(folder: Path, seed: int = 0) -> Path:
    """A tiny Qwen3 model and its tokenizer saved as a Hugging Face folder."""
    model, tokenizer = build_model(MODEL, seed=seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def two_revisions(hf_home: Path) -> tuple[str, str]:
    """MODEL in the hub cache at `main` and, with other weights, at the branch `v1`: (main's, v1's commit)."""
    main_commit = fill_hub_cache(hf_home, [MODEL], {})[MODEL]
    other = save_tiny_model(hf_home.parent / f"{hf_home.name}-v1", seed=7)
    return main_commit, put_snapshot(hf_home, MODEL, "model", other, ref="v1")


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    two_revisions(home)
    return home


def fake_model_folder(folder: Path, weights: bool = True, context: int = 4096) -> Path:
    """config.json (and a weights file): enough for what resolve() checks, without a model."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": context}))
    if weights:
        (folder / "model.safetensors").write_bytes(b"")
    return folder


def fake_verl_checkpoint(step_dir: Path, huggingface: bool = True) -> Path:
    actor = step_dir / "actor"
    actor.mkdir(parents=True)
    for rank in range(2):
        (actor / f"model_world_size_2_rank_{rank}.pt").write_bytes(b"")
    if huggingface:
        fake_model_folder(actor / "huggingface", weights=False)
    return actor


def test_revisions_of_one_repository_stay_side_by_side(hf_home):
    main_commit = (repo_folder(hf_home, MODEL, "model") / "refs" / "main").read_text()
    v1 = (repo_folder(hf_home, MODEL, "model") / "refs" / "v1").read_text()
    assert main_commit != v1
    for commit in (main_commit, v1):
        assert external_checkpoints.hub_snapshot(hf_home / "hub", MODEL, commit) is not None
    assert external_checkpoints.hub_snapshot(hf_home / "hub", MODEL, "v1").name == v1


def test_a_hub_checkpoint_is_pinned_to_its_revision(hf_home):
    external = external_checkpoints.resolve("base", {"path": MODEL, "revision": "v1"}, hf_home / "hub", offline=True)
    assert (external.kind, external.revision, external.steps) == ("hub", "v1", {0: f"{MODEL}@v1"})
    assert external_checkpoints.split_pinned(f"{MODEL}@v1") == (MODEL, "v1")
    assert external_checkpoints.split_pinned("/some/folder@x") == ("/some/folder@x", None)


def test_generation_reads_the_pinned_revision_offline(hf_home, monkeypatch):
    from balagg.evaluation.generation.generate import resolve_checkpoint

    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    v1 = (repo_folder(hf_home, MODEL, "model") / "refs" / "v1").read_text()
    main_commit = (repo_folder(hf_home, MODEL, "model") / "refs" / "main").read_text()
    assert resolve_checkpoint(f"{MODEL}@v1").name == v1
    assert resolve_checkpoint(f"{MODEL}@{main_commit}").name == main_commit
    assert resolve_checkpoint(MODEL).name == main_commit


def test_fetch_records_a_pinned_revision_and_its_commit(hf_home, tmp_path):
    v1 = (repo_folder(hf_home, MODEL, "model") / "refs" / "v1").read_text()
    out = tmp_path / "fetch.json"
    assert main(["fetch", "--hf-home", str(hf_home), "--model", f"{MODEL}@v1", "--out", str(out)]) == 0
    [repo] = json.loads(out.read_text())["repos"]
    assert (repo["repo_id"], repo["revision"], repo["commit"]) == (MODEL, "v1", v1)


def test_each_checkpoint_records_the_commit_of_its_own_revision(hf_home, tmp_path):
    """Two revisions of one model fetched into one campaign: each external checkpoint's checkpoint.json (its
    Table 1 row and MLflow tags) names the commit its revision resolved to, not the other's."""
    folder = repo_folder(hf_home, MODEL, "model")
    commits = {ref: (folder / "refs" / ref).read_text() for ref in ("main", "v1")}
    out = tmp_path / "fetch.json"
    assert main(["fetch", "--hf-home", str(hf_home), "--model", f"{MODEL}@v1", "--model", f"{MODEL}@main",
                 "--out", str(out)]) == 0
    fetch = json.loads(out.read_text())
    for ref, commit in commits.items():
        external = external_checkpoints.resolve(ref, {"path": MODEL, "revision": ref}, hf_home / "hub", offline=True)
        record = external_checkpoints.record(external, {}, fetch, "c", "sqlite:///x.db")
        assert (record["revision"], record["commit"], record["tags"]["commit"]) == (ref, commit, commit)


def test_fetch_names_a_revision_the_cache_lacks(hf_home, tmp_path, capsys):
    code = main(["fetch", "--hf-home", str(hf_home), "--model", f"{MODEL}@v9", "--out", str(tmp_path / "f.json")])
    err = capsys.readouterr().err
    assert code == 2 and f"{MODEL} at revision v9" in err


def test_a_local_folder_is_step_0(tmp_path):
    folder = fake_model_folder(tmp_path / "mine")
    external = external_checkpoints.resolve("mine", {"path": str(folder)}, tmp_path, offline=True)
    assert (external.kind, external.steps) == ("folder", {0: str(folder)})


def test_a_run_folder_is_a_curve_of_its_steps(tmp_path):
    for name in ("checkpoint-20", "global_step_40", "step-000010"):
        fake_model_folder(tmp_path / "run" / name)
    (tmp_path / "run" / "logs").mkdir()
    external = external_checkpoints.resolve("run", {"path": str(tmp_path / "run")}, tmp_path, offline=True)
    assert external.kind == "run"
    assert external.steps == {10: str(tmp_path / "run/step-000010"), 20: str(tmp_path / "run/checkpoint-20"),
                              40: str(tmp_path / "run/global_step_40")}


def test_near_miss_folders_beside_a_runs_steps_are_not_steps(tmp_path):
    """A copy or backup beside the step folders (its name a step folder's with more after it) is no
    checkpoint of the run: neither a step of its own nor in place of the real one."""
    for name in ("step-10", "checkpoint-20", "checkpoint-30-old", "step-10.bak", "global_step_50_tmp"):
        fake_model_folder(tmp_path / "run" / name)
    external = external_checkpoints.resolve("run", {"path": str(tmp_path / "run")}, tmp_path, offline=True)
    assert external.steps == {10: str(tmp_path / "run/step-10"), 20: str(tmp_path / "run/checkpoint-20")}
    from balagg.layout import parse_step_dirname

    assert [parse_step_dirname(name) for name in ("step-10", "step-10.bak", "step-000010-old")] == [10, None, None]


def test_a_verl_checkpoint_is_merged_where_the_workflow_says(tmp_path):
    actor = fake_verl_checkpoint(tmp_path / "global_step_5")
    external = external_checkpoints.resolve("v", {"path": str(tmp_path / "global_step_5")}, tmp_path, offline=True,
                                   merged_dir=lambda step: tmp_path / f"merged-{step}")
    assert (external.kind, external.verl, external.steps) == ("verl", {0: str(actor)}, {0: str(tmp_path / "merged-0")})
    assert external_checkpoints.context_source(external) == actor / "huggingface"
    command = external_checkpoints.verl_merge_command(actor, tmp_path / "out")
    assert command.startswith("python -m verl.model_merger merge --backend fsdp --local_dir ")


BAD_CHECKPOINTS = {  # case: what resolve() says of the entry bad_checkpoint() makes
    "no-revision": f"checkpoints.c: hub id {MODEL} needs a revision",
    "missing-revision": f"checkpoints.c: revision v9 of {MODEL} is not in the hub cache",
    "no-weights": "has no weights",
    "no-config": "has no config.json",
    "verl-without-huggingface": "has no huggingface/ folder",
    "run-step-without-weights": "checkpoints.c: step 3 ",
    "nothing-there": "does not exist",
    "revision-of-a-folder": "revision v1 is for hub ids",
}


def bad_checkpoint(case: str, tmp_path: Path) -> dict:
    """The entry of one case of BAD_CHECKPOINTS, or of the workflow's own refusals: `verl-without-verl`
    (a whole verl checkpoint), `short-context` (a folder whose context is 1024)."""
    if case in ("verl-without-huggingface", "verl-without-verl"):
        fake_verl_checkpoint(tmp_path / "global_step_1", huggingface=case == "verl-without-verl")
        return {"path": str(tmp_path / "global_step_1")}
    if case == "run-step-without-weights":
        fake_model_folder(tmp_path / "run" / "step-1")
        fake_model_folder(tmp_path / "run" / "step-3", weights=False)
        return {"path": str(tmp_path / "run")}
    return {
        "no-revision": lambda: {"path": MODEL},
        "missing-revision": lambda: {"path": MODEL, "revision": "v9"},
        "no-weights": lambda: {"path": str(fake_model_folder(tmp_path / "m", weights=False))},
        "no-config": lambda: {"path": str(tmp_path)},
        "nothing-there": lambda: {"path": str(tmp_path / "absent")},
        "revision-of-a-folder": lambda: {"path": str(fake_model_folder(tmp_path / "f")), "revision": "v1"},
        "short-context": lambda: {"path": str(fake_model_folder(tmp_path / "short", context=1024))},
    }[case]()


@pytest.mark.parametrize("case", sorted(BAD_CHECKPOINTS))
def test_bad_checkpoints_are_one_line_naming_them(hf_home, tmp_path, case):
    with pytest.raises(ValueError) as error:
        external_checkpoints.resolve("c", bad_checkpoint(case, tmp_path), hf_home / "hub", offline=True)
    assert BAD_CHECKPOINTS[case] in str(error.value) and "\n" not in str(error.value)


def test_an_uncached_revision_is_left_to_fetch_when_online(hf_home):
    external = external_checkpoints.resolve("c", {"path": MODEL, "revision": "v9"}, hf_home / "hub", offline=False)
    assert external.steps == {0: f"{MODEL}@v9"}


def write_evaluated_run(run: Path, steps: dict[int, float]) -> None:
    """An external checkpoint's curve.csv and scores.jsonl as the workflow writes them (one benchmark)."""
    rows = ["step,benchmark,acc@8,best@8,best@8_bootstrap,n_problems,n_samples,truncation_rate,unparsable_golds"]
    for step, acc in steps.items():
        for benchmark in ("math500", MEAN):
            rows.append(f"{step},{benchmark},{acc},{min(1.0, 2 * acc)},{acc},2,16,0.0,0")
        scores = run / eval_step_relpath(step, SCORES_FILE)
        scores.parent.mkdir(parents=True, exist_ok=True)
        scores.write_text("".join(json.dumps({"benchmark": "math500", "problem_id": f"p{i}",
                                              "correct": [i == 0] * 4 + [False] * 4}) + "\n" for i in range(2)))
    (run / EVAL_DIR / CURVE_FILE).write_text("\n".join(rows) + "\n")


def test_table1_gives_each_checkpoint_a_named_row_with_its_revision(tmp_path):
    from analysis_fixtures import make_campaign

    from balagg.analysis import load_results, table1

    hub, run = tmp_path / "base" / "external", tmp_path / "run" / "external"
    write_evaluated_run(hub, {0: 0.25})
    write_evaluated_run(run, {10: 0.5, 20: 0.375})
    (hub / "checkpoint.json").write_text(json.dumps({"name": "base", "kind": "hub", "source": MODEL, "revision": "v1",
                                                     "commit": "abcdef0123", "steps": {"0": f"{MODEL}@v1"}}))
    (run / "checkpoint.json").write_text(json.dumps({"name": "run", "kind": "run", "source": "/runs/x",
                                                     "revision": None, "commit": None,
                                                     "steps": {"10": "a", "20": "b"}}))
    table = table1.build_table(None, None, [hub / "checkpoint.json", run / "checkpoint.json"])
    base, mine = table.iloc[0], table.iloc[1]
    assert (base.dataset, base.model, base.aggregator) == ("(checkpoint)", "base", "(evaluated only)")
    assert (base.origin, mine.origin) == (f"{MODEL}@v1 (commit abcdef0)", "/runs/x")
    assert base["peak_acc@8"] == base["last_acc@8"] == 0.25 and base.revision == "v1" and base.commit == "abcdef0123"
    assert (mine["peak_acc@8"], mine["peak_acc@8_step"], mine["last_step"], mine["last_acc@8"]) == (0.5, 10, 20, 0.375)
    assert math.isfinite(mine["last_acc@8_se"])
    # an evaluation-only campaign: each row names its checkpoint and origin, under those headers
    markdown = table1.to_markdown(table, "evalonly")
    assert "| Checkpoint | Origin | Peak Acc@8 |" in markdown and "Aggregator" not in markdown
    assert f"| base | {MODEL}@v1 (commit abcdef0) |" in markdown and "| run | /runs/x |" in markdown
    latex = table1.to_latex(table, "evalonly")
    assert r"Checkpoint & Origin & Acc@8" in latex and "/runs/x" in latex
    # beside cells: the checkpoint's row says it was evaluated only, its origin follows the notes
    cells = table1.build_table(load_results(make_campaign(tmp_path / "camp")), None, [run / "checkpoint.json"])
    mixed = table1.to_markdown(cells, "mixed")
    assert "| (checkpoint) | run | (evaluated only) |" in mixed and "/runs/x |" not in mixed
    assert mixed.split("Checkpoints evaluated without training here:", 1)[1].split() == ["-", "run:", "/runs/x"]


def test_the_example_evaluates_the_papers_base_models_as_the_paper_does():
    """configs/evaluate.yaml: each paper model, pinned, with paper.yaml's evaluation settings and benchmarks."""
    import yaml

    root = Path(__file__).resolve().parents[1] / "configs"
    paper, example = (yaml.safe_load((root / name).read_text()) for name in ("paper.yaml", "evaluate.yaml"))
    assert set(example["checkpoints"]) == set(paper["models"]) and not example.get("aggregators")
    keys = ("path", "chat_template", "math_template", "code_template", "answer_format", "enable_thinking",
            "max_position_embeddings", "generate_resources")
    for name, spec in example["checkpoints"].items():
        assert {k: spec.get(k) for k in keys} == {k: paper["models"][name].get(k) for k in keys}
        assert len(spec["revision"]) == 40  # a commit: the same weights whenever it runs
    assert example["benchmarks"] == paper["benchmarks"] and example["eval"] == paper["eval"]


def test_a_campaign_with_a_grid_and_checkpoints_keeps_the_grids_rows_and_figures(tmp_path):
    """Table 1 of a grid plus an external checkpoint: the grid's rows as without it, then the checkpoint's;
    Figure 1 of the same campaign folder reads the grid's cells only."""
    import subprocess
    import sys

    import pandas as pd

    from analysis_fixtures import REPO, make_campaign

    root = make_campaign(tmp_path / "camp")
    run = root / "base" / "external"
    write_evaluated_run(run, {0: 0.25})
    (run / "checkpoint.json").write_text(json.dumps({"name": "base", "kind": "folder", "source": "/models/base",
                                                     "revision": None, "commit": None, "steps": {"0": "x"}}))
    tables = {}
    for name, extra in (("grid", []), ("both", ["--checkpoints", str(run / "checkpoint.json")])):
        done = subprocess.run([sys.executable, str(REPO / "analysis/table1.py"), "--campaign-dir", str(root),
                               "--out", str(tmp_path / name), *extra], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        tables[name] = pd.read_csv(tmp_path / name / "table1.csv")
    grid, both = tables["grid"], tables["both"]
    assert len(both) == len(grid) + 1 and both.iloc[-1]["model"] == "base"
    pd.testing.assert_frame_equal(both.iloc[:-1][grid.columns].reset_index(drop=True), grid)
    figure = subprocess.run([sys.executable, str(REPO / "analysis/figure1.py"), "--campaign-dir", str(root),
                             "--out", str(tmp_path / "fig")], capture_output=True, text=True)
    assert figure.returncode == 0 and (tmp_path / "fig/figure1.png").stat().st_size > 0, figure.stderr


def test_the_merge_rules_conda_env_pins_the_verl_extras_verl():
    import tomllib

    import yaml

    repo = Path(__file__).resolve().parents[1]
    extra = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]["verl"]
    env = yaml.safe_load((repo / "envs/verl.yaml").read_text())
    [pip] = [dep["pip"] for dep in env["dependencies"] if isinstance(dep, dict)]
    assert [line for line in pip if line.startswith("verl")] == [r for r in extra if r.startswith("verl")]


def test_the_plan_says_it_does_not_cost_external_checkpoints(capsys):
    assert main(["plan", "--configfile", str(Path(__file__).resolve().parents[1] / "configs/evaluate.yaml")]) == 0
    assert "not costed: 2 external checkpoint(s)" in capsys.readouterr().out


def test_results_of_an_evaluation_only_campaign_say_the_figures_do_not_apply(tmp_path):
    """`balagg results` on a campaign of checkpoints only: no "(missing)" for Figures 1-3 and the diagnosis,
    which only a campaign that trains makes; a grid campaign still gets "(missing)" for an absent figure."""
    from balagg.commands.results import results_text

    for name, dataset in (("evaluate", "(checkpoint)"), ("grid", "dapo")):
        analysis = tmp_path / name / "analysis"
        analysis.mkdir(parents=True)
        (analysis / "table1.md").write_text("# Table 1\n")
        (analysis / "table1.csv").write_text(f"dataset,model,aggregator\n{dataset},base,x\n")
    text = results_text(tmp_path / "evaluate")
    assert "Figures:    not applicable: an evaluation-only campaign" in text
    assert "figure1.png" not in text and "diagnosis.md" not in text
    assert text.count("(missing)") == 1 and "report.html   (missing)" in text
    grid = results_text(tmp_path / "grid")
    assert "figure1.png   (missing)" in grid and "not applicable" not in grid
