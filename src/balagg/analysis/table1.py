"""Table 1: peak and last-step Acc@8 / Best@8 / Best@8 (bootstrap, verl's) (means over the campaign's
benchmarks) per dataset x model x aggregator.

    python analysis/table1.py --campaign-dir results/X --out results/X/analysis \
        [--paper-values analysis/paper_values.csv]

Writes ``table1.csv`` (full precision, the step of each peak, seed spread, notes), ``table1.md`` and
``table1.tex`` (the best value of each column within a (dataset, model) in bold). Peak = maximum over
evaluated checkpoints after step 0 (the untrained model; its value is the CSV's ``step0_*``) of the
seed-mean curve; last = the seed-mean at the setting's final step; with
several seeds the cells read mean ± sample standard deviation. Cells that cannot be computed honestly
(failed or missing runs, final checkpoint not evaluated) are blank, marked and explained in notes.

``--paper-values`` (for the paper campaign) puts the published values beside ours with the difference
(ours - paper); rows match by name ignoring case and punctuation.

``--data-reports`` (prepare-data's reports, ``data/.../{name}.report.json``): a benchmark file that lost
rows to ``data.on_bad_row: skip`` (an unreadable line, a row without its answer) is named in the notes
with the rows it lost, since every number on that benchmark is over the rows kept.

``--checkpoints`` (each external checkpoint's ``checkpoint.json``, its ``eval/curve.csv`` beside) adds a row
per checkpoint evaluated without training (balagg.external_checkpoints): dataset ``(checkpoint)``, the checkpoint's
name as model, ``(evaluated only)`` as aggregator and its origin (``org/name@revision (commit ...)``, or
its folder) in the ``origin`` column; peak and last over its evaluated steps as for a cell (a single
checkpoint is its own peak and last step). A table of checkpoints only (an evaluation-only campaign) is
printed with the columns Checkpoint and Origin instead of Dataset, Model and Aggregator; in a table that
also has cells, the checkpoints' origins follow the notes.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from balagg.analysis import MEAN, peak_and_last
from balagg.analysis.results import METRICS
from balagg.analysis.seed_means import last_column, peak_column
from balagg.analysis.uncertainty import add_standard_errors
from balagg.benchmarks import BENCHMARKS, benchmark_order, mean_label
from balagg.analysis.results import CampaignResults
from balagg.external_checkpoints import CHECKPOINT_DATASET, EVALUATED_ONLY

# best@8: any of the 8 samples correct; best@8 (bootstrap): verl's best@8/mean, which the paper most
# likely reports (docs/files.md, summary.json)
VALUE_COLUMNS: tuple[str, ...] = (*(peak_column(m) for m in METRICS), *(last_column(m) for m in METRICS))


def metric_label(metric: str) -> str:
    """``acc@8`` -> ``Acc@8``, ``best@8_bootstrap`` -> ``Best@8 (bootstrap)``."""
    name, _, variant = metric.partition("_")
    return name.capitalize() + (f" ({variant})" if variant else "")


HEADERS = {column(metric): f"{kind} {metric_label(metric)}" for kind, column in (("Peak", peak_column), ("Last", last_column))
           for metric in METRICS}
DIGITS = 4
GAP = "—"


def normalise_name(name: str) -> str:
    """``Qwen2.5-Math-7B`` and ``qwen25_math_7b`` compare equal."""
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def load_paper_values(path: Path) -> pd.DataFrame:
    """``dataset,model,aggregator,metric,value,source`` rows; ``#`` lines are comments."""
    frame = pd.read_csv(path, comment="#")
    missing = {"dataset", "model", "aggregator", "metric", "value", "source"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: missing columns {sorted(missing)}")
    unknown = set(frame.metric) - set(VALUE_COLUMNS)
    if unknown:
        raise ValueError(f"{path}: unknown metric(s) {sorted(unknown)}; expected {list(VALUE_COLUMNS)}")
    return frame


def _keys(frame: pd.DataFrame) -> pd.Series:
    return frame[["dataset", "model", "aggregator"]].map(normalise_name).agg("|".join, axis=1)


def compare_with_paper(table: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """One row per published value: ``dataset, model, aggregator, metric, paper, source, ours, diff``
    (``diff`` = ours - paper; ``ours`` NaN where the campaign has no such row or value)."""
    ours = table.assign(key=_keys(table)).set_index("key")
    rows = []
    for key, published in zip(_keys(paper), paper.itertuples(index=False)):
        value = float(ours.at[key, published.metric]) if key in ours.index else math.nan
        rows.append({"dataset": published.dataset, "model": published.model, "aggregator": published.aggregator,
                     "metric": published.metric, "paper": float(published.value), "source": published.source,
                     "ours": value, "diff": value - float(published.value), "in_campaign": key in ours.index})
    return pd.DataFrame(rows, columns=["dataset", "model", "aggregator", "metric", "paper", "source", "ours",
                                       "diff", "in_campaign"])


def build_table(campaign: CampaignResults | None, paper: pd.DataFrame | None = None,
                checkpoints: list[Path] = ()) -> pd.DataFrame:
    """Our rows (:func:`~balagg.analysis.seed_means.peak_and_last` of the benchmark mean; each row's peak
    and last step are computed by :func:`~balagg.analysis.seed_means.peak_and_last_of_group`), with ``paper_<metric>``,
    ``paper_<metric>_source`` and ``diff_<metric>`` (ours - paper) beside each metric when ``paper`` is
    given (NaN where the paper has no value). ``checkpoints``: rows of external checkpoints after the grid's
    (:func:`checkpoint_rows`); ``campaign`` None for a campaign of checkpoints only."""
    parts = [add_standard_errors(peak_and_last(campaign, (MEAN,)), campaign)] if campaign is not None else []
    if checkpoints:
        parts.append(checkpoint_rows(list(checkpoints)))
    if not parts:
        raise ValueError("Table 1 needs cells or checkpoints")
    table = (pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]).drop(columns="benchmark")
    table.attrs["benchmarks"] = tuple(campaign.benchmarks) if campaign is not None else _curve_benchmarks(checkpoints)
    if paper is None:
        return table
    published = paper.assign(key=_keys(paper))
    key = _keys(table)
    for metric in VALUE_COLUMNS:
        rows = published[published.metric == metric].set_index("key")
        table[f"paper_{metric}"] = key.map(rows["value"]).astype(float)
        table[f"paper_{metric}_source"] = key.map(rows["source"])
        table[f"diff_{metric}"] = table[metric] - table[f"paper_{metric}"]
    return table


def _curve_benchmarks(records: list[Path]) -> tuple[str, ...]:
    """The benchmarks of the external checkpoints' curves (beside their checkpoint.json)."""
    from balagg.analysis.results import read_curve
    from balagg.layout import CURVE_FILE, EVAL_DIR

    names = set()
    for record in records:
        curve = Path(record).parent / EVAL_DIR / CURVE_FILE
        if curve.is_file():
            names |= {row["benchmark"] for row in read_curve(curve)}
    return benchmark_order(names)


def _means(table: pd.DataFrame) -> str:
    """``Six-benchmark means`` (the mean over the table's benchmarks: :func:`balagg.benchmarks.mean_label`)."""
    return mean_label(table.attrs.get("benchmarks", BENCHMARKS)).capitalize() + " means"


def checkpoint_row(record_path: Path) -> dict:
    """Table 1's row of one external checkpoint from its ``checkpoint.json`` and the curve beside it."""
    from balagg import external_checkpoints
    from balagg.analysis.results import read_curve
    from balagg.analysis.uncertainty import read_scores, stratified_mean_se
    from balagg.analysis.seed_means import PEAK_AND_LAST_COLUMNS
    from balagg.layout import CURVE_FILE, EVAL_DIR, SCORES_FILE, eval_step_relpath

    record_path = Path(record_path)
    record = json.loads(record_path.read_text())
    row: dict = {c: math.nan for c in PEAK_AND_LAST_COLUMNS}
    row.update({"dataset": CHECKPOINT_DATASET, "model": record["name"], "aggregator": EVALUATED_ONLY,
                "origin": external_checkpoints.label(record), "benchmark": MEAN, "n_seeds": 1, "n_seeds_grid": 1, "note": "",
                "source": record["source"], "revision": record.get("revision"), "commit": record.get("commit")})
    curve = pd.DataFrame(read_curve(record_path.parent / EVAL_DIR / CURVE_FILE))
    mean = curve[curve.benchmark == MEAN].set_index("step").sort_index() if len(curve) else curve
    expected = sorted(int(step) for step in record.get("steps", {}))
    if mean.empty:
        row.update(n_seeds=0, note="no evaluation")
        return row
    missing = sorted(set(expected) - set(mean.index))
    if missing:
        row["note"] = f"steps {missing} not evaluated"
    trained = [step for step in mean.index if step > 0] or list(mean.index)

    def se(step: int, metric: str) -> float:
        scores = record_path.parent / eval_step_relpath(step, SCORES_FILE)
        if not scores.is_file():
            return math.nan
        frame = pd.DataFrame(read_scores(scores))
        return stratified_mean_se(frame[metric], frame["benchmark"])[1] if metric in frame else math.nan

    for metric in METRICS:
        values = mean.loc[trained, metric]
        if values.isna().all():
            continue
        peak = int(values.idxmax())
        row[peak_column(metric)], row[peak_column(metric) + "_step"] = float(values.loc[peak]), peak
        row[peak_column(metric) + "_se"] = se(peak, metric)
        if 0 in mean.index:
            row[f"step0_{metric}"] = float(mean.loc[0, metric])
    last = max(expected) if expected else int(mean.index.max())
    row["last_step"] = last
    if last in mean.index:
        for metric in METRICS:
            row[last_column(metric)] = float(mean.loc[last, metric])
            row[last_column(metric) + "_se"] = se(last, metric)
    return row


def checkpoint_rows(records: list[Path]) -> pd.DataFrame:
    """One row per external checkpoint (:func:`checkpoint_row`), in the order given."""
    frame = pd.DataFrame([checkpoint_row(path) for path in records])
    for column in (*(peak_column(m) + "_step" for m in METRICS), "last_step"):
        if column in frame:
            frame[column] = frame[column].astype("Int64")
    return frame


def best_mask(table: pd.DataFrame) -> pd.DataFrame:
    """True where a value is the best (highest, at display precision) of its column in its (dataset, model)."""
    rounded = table[list(VALUE_COLUMNS)].round(DIGITS)
    # external checkpoints compare among themselves (their rows share the dataset column)
    setting = table.model.where(table.dataset != CHECKPOINT_DATASET, "")
    best = rounded.groupby([table.dataset, setting]).transform("max")
    return (rounded == best) & rounded.notna()


def _cell_text(row: pd.Series, metric: str, bold: bool, latex: bool) -> str:
    value = row[metric]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "--" if latex else GAP
    text = f"{value:.{DIGITS}f}"
    spread = row.get(f"{metric}_std")
    if spread is not None and not (isinstance(spread, float) and math.isnan(spread)):
        text += (r" $\pm$ " if latex else " ± ") + f"{spread:.{DIGITS}f}"
    error = row.get(f"{metric}_se")
    if error is not None and not (isinstance(error, float) and math.isnan(error)):
        text += f" (SE {error:.{DIGITS}f})"
    if bold:
        text = rf"\textbf{{{text}}}" if latex else f"**{text}**"
    return text


def benchmark_file_notes(report_paths) -> list[str]:
    """One note per benchmark file whose prepare-data report (:class:`balagg.data.prepare.PrepareReport`'s
    JSON) lists skipped rows: how many of how many, and which (the first three, with file and line).
    Reports of training sets, and reports that cannot be read, say nothing here."""
    from balagg.data.prepare import describe_bad_row
    from balagg.data.sources import SOURCES

    notes = []
    for path in report_paths:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        source = SOURCES.get(report.get("source")) if isinstance(report, dict) else None
        if source is None or source.role != "benchmark" or not report.get("bad_rows"):
            continue
        bad = report["bad_rows"]
        shown = "; ".join(describe_bad_row(b) for b in bad[:3]) + (f"; {len(bad) - 3} more in {path}" if len(bad) > 3 else "")
        notes.append(f"{report['source']}: {len(bad)} of {report['rows_read']} rows of the benchmark file skipped "
                     f"(data.on_bad_row: skip), so every value on {report['source']} is over its "
                     f"{report['written']} remaining problems: {shown}")
    return notes


def _notes(table: pd.DataFrame) -> dict[int, int]:
    """Row index -> note number, for rows with a note."""
    numbered = [i for i, note in table.note.items() if isinstance(note, str) and note]
    return {i: n for n, i in enumerate(numbered, start=1)}


def _checkpoints_only(table: pd.DataFrame) -> bool:
    return bool(len(table)) and bool((table.dataset == CHECKPOINT_DATASET).all())


def _origin_lines(table: pd.DataFrame) -> list[str]:
    """``name: origin`` of each external checkpoint in a table that also has cells."""
    if _checkpoints_only(table) or "origin" not in table:
        return []
    rows = table[table.dataset == CHECKPOINT_DATASET]
    return [f"{row.model}: {row.origin}" for row in rows.itertuples(index=False)]


def to_markdown(table: pd.DataFrame, campaign_name: str, comparison: pd.DataFrame | None = None,
                file_notes: list[str] = ()) -> str:
    """Table 1 in Markdown: the rows, their numbered notes, ``file_notes`` (:func:`benchmark_file_notes`)
    and the comparison with the paper. A table of external checkpoints only has the columns Checkpoint and
    Origin in place of Dataset, Model and Aggregator."""
    bold, notes = best_mask(table), _notes(table)
    external = bool((table.dataset == CHECKPOINT_DATASET).any())
    only = _checkpoints_only(table)
    keys = "| Checkpoint | Origin | " if only else "| Dataset | Model | Aggregator | "
    lines = [f"# Table 1: {campaign_name}", "",
             f"{_means(table)}. Peak: maximum over evaluated checkpoints after step 0 (step in table1.csv); "
             "last: final step. Mean ± sample std over seeds where there are several; (SE): standard error over "
             "problems at that step (balagg.analysis.uncertainty; the peak's is not corrected for choosing the maximum). "
             f"Bold: best per (dataset, model){'; external checkpoints compare among themselves' if external else ''}. "
             f"{GAP}: no honest value (see notes).", "",
             keys + " | ".join(HEADERS[m] for m in VALUE_COLUMNS) + " | Seeds |",
             ("|---|---|" if only else "|---|---|---|") + "---:|" * len(VALUE_COLUMNS) + "---:|"]
    previous = None
    for i, row in table.iterrows():
        mark = f" [{notes[i]}]" if i in notes else ""
        if only:
            head = [row.model + mark, row.origin]
        else:
            setting = (row.dataset, row.model)
            head = (["", ""] if setting == previous else [row.dataset, row.model]) + [row.aggregator + mark]
            previous = setting
        values = [_cell_text(row, m, bool(bold.at[i, m]), latex=False) for m in VALUE_COLUMNS]
        lines.append("| " + " | ".join([*head, *values, f"{row.n_seeds}/{row.n_seeds_grid}"]) + " |")
    if notes:
        lines += ["", "Notes:", ""]
        lines += [f"{n}. " + (table.at[i, 'model'] if only else f"{table.at[i, 'model']} / {table.at[i, 'dataset']} / "
                              f"{table.at[i, 'aggregator']}") + f": {table.at[i, 'note']}" for i, n in notes.items()]
    if _origin_lines(table):
        lines += ["", "Checkpoints evaluated without training here:", ""] + [f"- {line}" for line in _origin_lines(table)]
    if file_notes:
        lines += ["", "Benchmark files:", ""] + [f"- {note}" for note in file_notes]
    if comparison is not None:
        lines += ["", "## Against the paper", "",
                  f"Ours − paper: ours {_means(table).lower()}, the paper's its Table 1's. Source `paper`: the "
                  "paper's Table 1; `digest-unconfirmed`: "
                  "a third-party digest of the paper, not confirmed. Names match ignoring case and punctuation.",
                  "", "| Dataset | Model | Aggregator | Metric | Paper | Source | Ours | Ours − paper |",
                  "|---|---|---|---|---:|---|---:|---:|"]
        for r in comparison.itertuples(index=False):
            ours = ("not in campaign" if not r.in_campaign else GAP) if pd.isna(r.ours) else f"{r.ours:.{DIGITS}f}"
            diff = GAP if pd.isna(r.diff) else f"{r.diff:+.{DIGITS}f}"
            lines.append(f"| {r.dataset} | {r.model} | {r.aggregator} | {HEADERS[r.metric]} | "
                         f"{r.paper:.{DIGITS}f} | {r.source} | {ours} | {diff} |")
    return "\n".join(lines) + "\n"


def _tex_escape(text: str) -> str:
    return re.sub(r"([&%$#_{}])", r"\\\1", str(text))


def to_latex(table: pd.DataFrame, campaign_name: str, file_notes: list[str] = ()) -> str:
    """Table 1 as a LaTeX tabular, with the same notes and columns as :func:`to_markdown`."""
    bold, notes = best_mask(table), _notes(table)
    only = _checkpoints_only(table)
    keys = ["Checkpoint", "Origin"] if only else ["Dataset", "Model", "Aggregator"]
    lines = [rf"% Table 1 of campaign {_tex_escape(campaign_name)}, generated by analysis/table1.py",
             r"\begin{tabular}{" + "l" * len(keys) + "r" * len(VALUE_COLUMNS) + "}", r"\toprule",
             " &" * len(keys) + rf" \multicolumn{{{len(METRICS)}}}{{c}}{{Peak}} & "
             rf"\multicolumn{{{len(METRICS)}}}{{c}}{{Last step}} \\",
             " & ".join(keys) + " & " + " & ".join(metric_label(m) for m in (*METRICS, *METRICS)) + r" \\",
             r"\midrule"]
    previous = None
    for i, row in table.iterrows():
        mark = rf"$^{{{notes[i]}}}$" if i in notes else ""
        if only:
            head = [_tex_escape(row.model) + mark, _tex_escape(row.origin)]
        else:
            setting = (row.dataset, row.model)
            if previous is not None and setting != previous:
                lines.append(r"\midrule")
            head = ["", ""] if setting == previous else [_tex_escape(row.dataset), _tex_escape(row.model)]
            head.append(_tex_escape(row.aggregator) + mark)
            previous = setting
        values = [_cell_text(row, m, bool(bold.at[i, m]), latex=True) for m in VALUE_COLUMNS]
        lines.append(" & ".join([*head, *values]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [rf"% {n}: {_tex_escape(table.at[i, 'note'])}" for i, n in notes.items()]
    extra = [*(f"Evaluated without training here: {line}" for line in _origin_lines(table)), *file_notes]
    if notes or extra:
        lines.append(r"\par\footnotesize")
        lines += [rf"$^{{{n}}}$ {_tex_escape(table.at[i, 'note'])}\\" for i, n in notes.items()]
        lines += [rf"{_tex_escape(note)}\\" for note in extra]
    return "\n".join(lines) + "\n"
