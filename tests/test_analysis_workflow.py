"""workflow/rules/analysis.smk: every artifact built by its rule from the cells' files, and the HTML report."""

from __future__ import annotations

import re
import shutil

import pytest

from analysis_fixtures import REPO, make_campaign
from test_workflow import snakemake

# Only the analysis stage of the real workflow (its common.smk and analysis.smk), over a hand-made campaign.
SNAKEFILE = """\
configfile: "config.yaml"
include: "workflow/rules/common.smk"
include: "workflow/rules/analysis.smk"
rule all:
    default_target: True
    input: targets.analysis_targets(GRID)
"""
CONFIG = """\
campaign: camp
models: {qwen-a: {path: none}}
datasets: {dapo: {loader: dapo-math-17k, source: none}, polaris: {loader: polaris-53k, source: none}}
benchmarks: {math500: none}
aggregators: [seq-agg, token-agg, balanced-agg]
seeds: [0, 1]
train: {total_steps: 1, eval_every: 1}
analysis:
  paper_values: analysis/paper_values.csv
  figure2_model: qwen-a
  smoothing: 3
  cv_threshold: 0.5
  gap_threshold: 0.25
"""


@pytest.mark.slow
def test_analysis_rules_build_every_artifact_and_the_report(tmp_path):
    for name in ("analysis", "workflow", "envs"):
        shutil.copytree(REPO / name, tmp_path / name)
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "config.yaml").write_text(CONFIG)
    make_campaign(tmp_path / "results" / "camp", summary_seeds=())

    done = snakemake("--cores", "2", cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "results/camp/analysis"
    for name in ("table1.csv", "table1.md", "table1.tex", "table1_vs_paper.csv", "diagnosis.md", "diagnosis.csv",
                 *(f"figure{n}.{fmt}" for n in (1, 2, 3) for fmt in ("png", "pdf"))):
        assert (out / name).stat().st_size > 0, name
    for name in ("table1", "figure1", "figure2", "figure3", "diagnosis"):
        assert (tmp_path / f"results/camp/logs/analysis/{name}.log").exists()
    assert "| dapo | qwen-a | seq-agg | 0.3600 ± 0.0283 |" in (out / "table1.md").read_text()

    report = snakemake("--cores", "1", "--report", "report.html", cwd=tmp_path, check=False)
    assert report.returncode == 0, report.stderr[-3000:]
    html = (tmp_path / "report.html").read_text()
    for name in ("table1.md", "figure1.png", "figure2.png", "figure3.png", "diagnosis.md"):
        assert name in html
    captions = re.findall(r'of campaign <tt class=\\?"docutils literal\\?">(\w*)</tt>', html)
    assert len(captions) == html.count("of campaign") > 0 and set(captions) == {"camp"}  # the config's campaign


@pytest.mark.parametrize("caption", sorted((REPO / "workflow/report").glob("*.rst")), ids=lambda path: path.stem)
def test_report_captions_are_valid_restructuredtext(caption):
    """Snakemake renders each caption (Jinja, then reStructuredText) into the report: a markup error there
    (``|A_i|`` read as a substitution) prints an ERROR line in the report's log and shows in the report."""
    from docutils.core import publish_parts

    text = re.sub(r"\{\{.*?\}\}", "campaign", caption.read_text())
    publish_parts(text, writer="html", settings_overrides={"halt_level": 2, "report_level": 5})
