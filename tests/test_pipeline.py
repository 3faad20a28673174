"""The whole DAG on the smoke grid (configs/smoke.yaml): tiny world -> data -> train x 3 aggregators ->
generate + score every checkpoint -> curves -> Table 1, Figures 1-3, diagnosis -> MLflow.

One real run (a few minutes on 2 cores), shared by the tests below, which check the outputs' contents.
"""

from __future__ import annotations

import csv
import json
import math
import re

import pytest

from checkout import copy_workflow
from test_workflow import snakemake

from balagg.analysis import figure2, figure3, load_results

pytestmark = pytest.mark.slow
AGGREGATORS = ["balanced-agg", "seq-agg", "token-agg"]
CELLS = [f"tiny-s/arith-long/{aggregator}/seed0" for aggregator in AGGREGATORS]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """A finished smoke campaign in a scratch copy of the workflow; returns its results folder.

    Run as `make demo` runs the embedded default: Snakemake under `balagg jobserver`, so the jobs
    below are forked from the job server (test_every_python_job_was_served checks that they were)."""
    work = copy_workflow(tmp_path_factory.mktemp("smoke"))
    run = snakemake("--cores", "2", "--configfile", "configs/smoke.yaml", cwd=work, job_server_log=work / JOB_SERVER_LOG)
    (work / CONSOLE).write_text(run.stdout + run.stderr)
    return work


JOB_SERVER_LOG = "jobserver.log"
CONSOLE = "console.txt"


def test_the_console_shows_progress_in_a_few_lines_and_the_log_file_keeps_every_job(smoke):
    """The workflow profile's console (the balagg logger): the jobs to run, progress lines up to 100 %,
    the complete log's path; no job blocks. The log file it names holds Snakemake's full record."""
    lines = (smoke / CONSOLE).read_text().splitlines()
    assert len(lines) < 40, "\n".join(lines)
    assert not [line for line in lines if re.match(r"^(local)?rule \w+:$", line)], "\n".join(lines)
    (total,) = [int(m.group(1)) for line in lines if (m := re.match(r"^(\d+) jobs to run: .*train \d+", line))]
    progress = [int(m.group(1)) for line in lines if (m := re.match(rf"^\[ *(\d+)/{total} jobs, +\d+%\]", line))]
    assert len(progress) >= 5 and progress == sorted(progress) and progress[-1] == total, "\n".join(lines)
    (log,) = [line.split(": ", 1)[1] for line in lines if line.startswith("Complete log(s): ")]
    full = open(log).read()
    assert full.count("rule train:") == len(CELLS) and f"{total} of {total} steps (100%) done" in full


def test_every_python_job_was_served_by_the_job_server(smoke):
    """The jobs started once the server listened ran in it: none refused, none failed."""
    log = (smoke / JOB_SERVER_LOG).read_text()
    ended = re.findall(r"job \d+ ended \((-?\d+)\).*?: (\S+)", log)
    assert "refused" not in log, log
    commands = {command for _status, command in ended}
    assert {"train", "generate", "score"} <= commands, log
    assert all(status == "0" for status, _ in ended), log


def test_every_cell_trained_and_was_evaluated_at_every_checkpoint(smoke):
    results = smoke / "results/smoke"
    card = json.loads((results / "models/tiny-s/card.json").read_text())
    assert card["model"] == "tiny-s"
    for cell in CELLS:
        manifest = json.loads((results / cell / "manifest.json").read_text())
        assert [c["step"] for c in manifest["checkpoints"]] == [2, 4]  # step 0: the initial model's own evaluation
        metrics = [json.loads(line) for line in (results / cell / "train/metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in metrics] == [1, 2, 3, 4]
        assert all(math.isfinite(m["pg_loss"]) and math.isfinite(m["len_cv"]) for m in metrics)
        with (results / cell / "eval/curve.csv").open() as handle:
            curve = list(csv.DictReader(handle))
        assert sorted({int(row["step"]) for row in curve}) == [0, 2, 4]
        assert {row["benchmark"] for row in curve} == {"math500", "aime24", "aime25", "olympiadbench", "minerva",
                                                       "livecodebench", "mean"}
        assert all(0 <= float(row["acc@8"]) <= float(row["best@8"]) <= 1 for row in curve)
        # verl's bootstrap Best@8 lies between (1 - (1 - c/8)^8 >= c/8 per problem, <= 1[c > 0])
        assert all(float(row["acc@8"]) <= float(row["best@8_bootstrap"]) <= float(row["best@8"]) for row in curve)
    # step 0 is the initial model: one evaluation shared by every cell of the model
    shared = (results / "tiny-s/initial/eval/step-000000/summary.json").read_text()
    assert json.loads(shared)["step"] == 0


def test_table1_has_one_finite_row_per_aggregator(smoke):
    with (smoke / "results/smoke/analysis/table1.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(row["aggregator"] for row in rows) == AGGREGATORS
    for row in rows:
        for key in ("peak_acc@8", "peak_best@8", "last_acc@8", "last_best@8"):
            assert math.isfinite(float(row[key])), (row["aggregator"], key)
        assert int(row["peak_acc@8_step"]) in (2, 4)
    assert "**" in (smoke / "results/smoke/analysis/table1.md").read_text()


def test_figures_have_one_series_per_aggregator(smoke):
    results = load_results(smoke / "results/smoke")
    loss_figure = figure2.make_figure(results, smoothing=1)
    (panel,) = loss_figure.axes
    smoothed = [line for line in panel.get_lines() if line.get_gid() == "smoothed"]
    assert sorted(line.get_label() for line in smoothed) == AGGREGATORS
    assert all(len(line.get_xdata()) == 4 for line in smoothed)
    length_figure = figure3.make_figure(results)
    for axis in length_figure.axes:
        assert len([line for line in axis.get_lines() if line.get_gid() == "smoothed"]) == 3
    for name in ("figure1", "figure2", "figure3"):
        assert (smoke / f"results/smoke/analysis/{name}.png").stat().st_size > 0


def test_error_bars_comparison_and_mechanism_outputs(smoke):
    analysis = smoke / "results/smoke/analysis"
    with (analysis / "table1.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:  # one seed: the standard error over problems of every value
        for key in ("peak_acc@8", "last_acc@8", "last_best@8"):
            assert 0 < float(row[f"{key}_se"]) < 0.5, (row["aggregator"], key)
    with (analysis / "comparison.csv").open() as handle:
        pairs = list(csv.DictReader(handle))
    import yaml

    from balagg.train.config import CellConfig

    train = yaml.safe_load((smoke / "configs/smoke.yaml").read_text())["train"]
    trained = [s for s in CellConfig.checkpoint_steps_of(train["total_steps"], train["eval_every"]) if s > 0]
    # three pairs of aggregators: at the last step, over the checkpoints, and at each earlier checkpoint
    assert sorted((row["point"], row["step"]) for row in pairs) == sorted(
        [("last", str(trained[-1])), ("mean", "")] * 3 + [("step", str(s)) for s in trained[:-1]] * 3)
    assert all(row["verdict"] in ("no difference beyond error", f"{row['a']} > {row['b']}",
                                  f"{row['a']} < {row['b']}") for row in pairs)
    assert all(float(row["mdd"]) > 0 and int(row["n_units"]) == 6 * 4 for row in pairs)
    with (analysis / "mechanism.csv").open() as handle:
        mechanism = {row["aggregator"]: row for row in csv.DictReader(handle)}
    assert sorted(mechanism) == AGGREGATORS
    from balagg.analysis.mechanism import mechanism_frame

    shares = mechanism_frame(load_results(smoke / "results/smoke")).dropna(subset=["neg_share"])
    balanced = shares[shares.aggregator != "token-agg"].neg_share
    assert len(balanced) and balanced.to_numpy() == pytest.approx(0.5)  # balanced by construction
    assert "Beyond error" in (analysis / "diagnosis.md").read_text()
    assert (analysis / "mechanism.png").stat().st_size > 0


def test_mlflow_has_every_cell_with_step_and_eval_metrics_and_the_analysis(smoke):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{smoke / 'results/smoke/mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["smoke"], output_format="list")
    cells = {run.data.tags.get("aggregator"): run for run in runs if run.data.tags.get("aggregator")}
    assert sorted(cells) == AGGREGATORS and len(runs) == 4  # three cells and one analysis run
    client = mlflow.MlflowClient()
    assert client.get_experiment_by_name("smoke").tags["mlflow.experimentKind"] == "custom_model_development"
    for aggregator, run in cells.items():
        assert run.data.tags["model"] == "tiny-s" and run.data.tags["seed"] == "0"
        assert run.info.run_name == f"tiny-s/arith-long/{aggregator}/seed0"
        assert [m.step for m in client.get_metric_history(run.info.run_id, "pg_loss")] == [1, 2, 3, 4]
        history = client.get_metric_history(run.info.run_id, "eval/mean/acc_at_8")
        assert sorted(m.step for m in history) == [0, 2, 4]
        assert len(client.get_metric_history(run.info.run_id, "eval/livecodebench/best_at_8")) == 3
    (analysis,) = [run for run in runs if run.data.tags.get("kind") == "analysis"]
    artifacts = {item.path for item in client.list_artifacts(analysis.info.run_id)}
    assert {"table1.csv", "figure1.png", "figure2.png", "figure3.png", "diagnosis.md"} <= artifacts


def test_a_second_run_has_nothing_to_do(smoke):
    result = snakemake("-n", "--configfile", "configs/smoke.yaml", cwd=smoke)
    assert "Nothing to be done" in result.stdout


def test_rerunning_a_cells_evaluation_logs_into_the_same_run(smoke):
    cell = f"results/smoke/{CELLS[0]}"
    snakemake("--cores", "2", "--configfile", "configs/smoke.yaml", "-R", f"{cell}/eval/curve.csv", cwd=smoke)
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{smoke / 'results/smoke/mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["smoke"], output_format="list")
    assert len(runs) == 4  # no duplicate run
    (run,) = [r for r in runs if r.data.tags.get("aggregator") == "balanced-agg"]
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "eval/mean/acc_at_8")
    assert sorted(m.step for m in history) == [0, 2, 4]  # reattached, not doubled


# Runs inside the report page in headless Chromium: decodes every PNG result with the browser's own image
# decoder, draws it on a canvas and counts the pixels that are not background; reads the text results.
REPORT_PROBE = """
<script>
window.addEventListener("load", async () => {
  const found = {images: {}, texts: {}, error: null};
  try {
  for (const [path, entry] of Object.entries(results)) {
    const name = path.split("/").pop();
    if (entry.mime_type === "image/png") {
      const image = new Image();  // onload, not image.decode(): decode() never settles under --virtual-time-budget
      await new Promise((loaded, failed) => { image.onload = loaded; image.onerror = failed; image.src = entry.data_uri; });
      const canvas = document.createElement("canvas");
      canvas.width = image.naturalWidth; canvas.height = image.naturalHeight;
      const context = canvas.getContext("2d");
      context.drawImage(image, 0, 0);
      const pixels = context.getImageData(0, 0, canvas.width, canvas.height).data;
      let inked = 0;
      for (let i = 0; i < pixels.length; i += 4) {
        if (pixels[i + 3] > 0 && (pixels[i] < 240 || pixels[i + 1] < 240 || pixels[i + 2] < 240)) inked++;
      }
      found.images[name] = {width: image.naturalWidth, height: image.naturalHeight, inked: inked / (pixels.length / 4)};
    } else {
      found.texts[name] = await (await fetch(entry.data_uri)).text();
    }
  }
  } catch (error) { found.error = String(error); }
  // the page it opens on: the landing page's figures, decoded, and whether the rule graph is drawn
  found.landing = Array.from(document.querySelectorAll('img[alt^="figure"]')).map(i => [i.alt, i.naturalWidth]);
  found.rulegraph = document.querySelector("div#rulegraph") !== null;  // (a script has that id too)
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});
</script>
"""


def png_size(path):
    header = path.read_bytes()[:24]
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def test_html_report_renders_table1_figures_and_diagnosis_in_chromium(smoke, tmp_path):
    """results/{campaign}/report.html, built by the workflow, opened in headless Chromium (Debian's
    `chromium`): Figures 1-3 decode to non-blank images of their files' size; Table 1 and the diagnosis
    are in it; the report's own page lists their categories; it opens on Table 1 and Figures 1-3, not
    on the rule graph."""
    import html
    import re
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it)")
    report = smoke / "results/smoke/report.html"
    page = tmp_path / "report.html"
    head, tail = report.read_text().rsplit("</body>", 1)  # the last one: the report embeds pages of its own
    page.write_text(head + REPORT_PROBE + "</body>" + tail)
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=30000",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=240).stdout
    match = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert match, "the probe did not run in the report page"
    found = json.loads(html.unescape(match.group(1)))
    assert found["error"] is None, found["error"]
    analysis = smoke / "results/smoke/analysis"
    for name in ("figure1.png", "figure2.png", "figure3.png"):
        image = found["images"][name]
        assert (image["width"], image["height"]) == png_size(analysis / name)
        assert image["inked"] > 0.01, f"{name} renders blank"
    assert found["texts"]["table1.md"] == (analysis / "table1.md").read_text()
    assert "| " in found["texts"]["table1.md"] and "seq-agg" in found["texts"]["table1.md"]
    assert found["texts"]["diagnosis.md"] == (analysis / "diagnosis.md").read_text()
    rendered = re.sub(r"<(script|style)\b.*?</\1>|<[^>]+>", " ", dom, flags=re.S)  # what the page shows
    menu = " ".join(rendered.split())
    assert "Loading Snakemake Report" in menu and "Results" in menu
    for category in ("Table 1", "Figures", "Diagnosis"):
        assert category in menu, f"the report's menu lacks {category}"
    assert not found["rulegraph"] and [alt for alt, width in found["landing"] if width > 0] == [
        "figure1.png", "figure2.png", "figure3.png"], found["landing"]
    first_row = next(line for line in (analysis / "table1.md").read_text().splitlines() if "seq-agg" in line)
    cells = [cell.strip().replace("**", "") for cell in first_row.strip("|").split("|")]
    assert " ".join(cells) in menu, "Table 1's first row is not on the page the report opens on"
    assert menu.index("Table 1 Six-benchmark means") < menu.index("Figure 1")


def test_campaign_results_end_on_table1_report_and_mlflow_command(smoke):
    from balagg.commands.results import results_text

    text = results_text(smoke / "results/smoke")
    table = (smoke / "results/smoke/analysis/table1.md").read_text().rstrip()
    assert table in text and "(missing)" not in text
    assert "report.html" in text and "figure3.png" in text
    experiment_id = json.loads((smoke / "results/smoke/mlflow/experiment.json").read_text())["experiment_id"]
    assert f"ui --backend-store-uri sqlite:///" in text and f"#/experiments/{experiment_id}/runs" in text


def test_the_printed_mlflow_command_opens_the_runs_table_with_the_campaigns_runs_and_datasets(smoke, tmp_path):
    """The MLflow line of `balagg results`, run as printed (on a free port) and its page opened in headless
    Chromium: the runs table (not the traces overview) in the campaign's saved view lists every cell's run
    by name with its aggregator and Table 1's headline values as columns; without the view, the Dataset
    column shows the cell's training set. The screenshots are kept beside the test's files (runs*.png)."""
    import os
    import shlex
    import shutil
    import signal
    import socket
    import subprocess
    import time
    import urllib.request

    from balagg.commands.results import results_text

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs it)")
    line = next(line for line in results_text(smoke / "results/smoke").splitlines() if line.startswith("MLflow:"))
    command, _, page = line.removeprefix("MLflow:").partition("# then open http://127.0.0.1:5000/")
    assert page.startswith("#/experiments/") and page.endswith("/runs?viewStateShareKey=balagg-cells"), line
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([*shlex.split(command), "--port", str(port), "--workers", "1"], cwd=smoke,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "mlflow ui did not start"
                time.sleep(2)
        chromium = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1600,900",
                    "--virtual-time-budget=30000"]
        doms = {}
        for name, shown in (("runs", page), ("runs-default", page.partition("?")[0])):
            url = f"http://127.0.0.1:{port}/{shown}"
            subprocess.run([*chromium, f"--screenshot={tmp_path / f'{name}.png'}", url], capture_output=True, timeout=240)
            doms[name] = subprocess.run([*chromium, "--dump-dom", url], capture_output=True, text=True, timeout=240).stdout
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its workers
        server.wait(timeout=60)
    assert (tmp_path / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rendered = {name: " ".join(re.sub(r"<(script|style)\b.*?</\1>|<[^>]+>", " ", dom, flags=re.S).split())
                for name, dom in doms.items()}
    for name, dom in doms.items():
        assert "Training runs" in rendered[name] and "Run Name" in rendered[name], rendered[name][:2000]
        for cell in CELLS:
            assert cell in dom, f"{cell} is not in the runs table ({name})"
    view = rendered["runs"]
    assert all(header in view for header in ("aggregator", "peak/acc_at_8", "last/best_at_8")), view[:3000]
    table = {row["aggregator"]: row for row in csv.DictReader((smoke / "results/smoke/analysis/table1.csv").open())}
    for aggregator in AGGREGATORS:  # one seed: the run's headline value is its Table 1 value
        assert f"{float(table[aggregator]['peak_acc@8']):.4f}".rstrip("0") in view, (aggregator, view[:3000])
    assert "arith-long (" in rendered["runs-default"] and "Training" in rendered["runs-default"], "no Dataset column"
