"""Load a campaign's per-cell result files (docs/files.md) into tidy tables, reporting every gap.

A cell is ``results/{campaign}/{model}/{dataset}/{aggregator}/seed{seed}/``. From each cell this reads

- evaluations: ``eval/curve.csv`` (all steps in one table) plus any ``eval/step-*/summary.json`` whose
  step the curve lacks;
- training metrics: ``train/metrics.jsonl`` (one JSON object per optimiser step);
- the steps that *should* have been evaluated: the ``train/checkpoints/step-*`` and ``eval/step-*``
  folders and the checkpoint steps listed in ``manifest.json``.

Nothing is silently dropped or averaged over less than it claims: a step that lacks a summary or any of
the campaign's benchmarks is left out of ``evals`` and recorded as a :class:`Problem`; a cell without any
evaluation is a ``failed-cell`` problem; a (model, dataset, aggregator, seed) of the grid with no folder
is a ``missing-cell`` problem. Downstream code turns problems into explicitly marked gaps.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from balagg.benchmarks import MEAN, PAPER_SAMPLES, UNPARSABLE_GOLDS, benchmark_order, eval_metrics, samples_of_columns
from balagg.evaluation.scoring.metrics import summary_rows
from balagg.io import read_jsonl_lines
from balagg.layout import (
    CAMPAIGN_DIRS,
    CELL_PATTERN,
    Cell,
    CHECKPOINTS_DIR,
    CURVE_FILE,
    EVAL_DIR,
    CELL_MANIFEST_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    TRAIN_DIR,
    parse_step_dirname,
)

__all__ = [
    "MEAN",
    "METRICS",
    "Cell",
    "CellFolder",
    "Problem",
    "CampaignResults",
    "load_results",
    "cell_from_path",
]

METRICS: tuple[str, ...] = eval_metrics(PAPER_SAMPLES)
"""What the analysis reports: Acc@8, Best@8 and the bootstrap Best@8 (the paper's n = 8 samples per problem)."""

REQUIRED_METRICS: tuple[str, ...] = METRICS[:2]
"""A step counts as evaluated when Acc@8 and Best@8 are finite; ``best@8_bootstrap`` is NaN in summaries
scored before it existed."""

_CURVE_COLUMNS = ("step", "benchmark", *REQUIRED_METRICS)


@dataclass(frozen=True)
class Problem:
    """Something missing or broken in the campaign, with the cell and step it concerns.

    ``kind`` is one of ``missing-cell``, ``failed-cell``, ``missing-checkpoint``, ``incomplete-step``,
    ``no-train-metrics``, ``unfinished-training``, ``bad-file``, ``seed-mismatch``.
    """

    kind: str
    message: str
    cell: Cell | None = None
    step: int | None = None

    def __str__(self) -> str:
        where = f"{self.cell}" if self.cell else "campaign"
        if self.step is not None:
            where += f" step {self.step}"
        return f"[{self.kind}] {where}: {self.message}"


@dataclass
class CellFolder:
    """What was found in one cell folder."""

    key: Cell
    path: Path
    expected_steps: set[int] = field(default_factory=set)
    evaluated_steps: set[int] = field(default_factory=set)
    has_manifest: bool = False
    has_train_metrics: bool = False

    @property
    def failed(self) -> bool:
        return not self.evaluated_steps

    @property
    def final_step(self) -> int | None:
        """The last step that should have been evaluated (``None`` when nothing is known)."""
        steps = self.expected_steps | self.evaluated_steps
        return max(steps) if steps else None


@dataclass
class CampaignResults:
    """A campaign's results as tidy tables.

    ``evals``: one row per (cell, complete step, benchmark incl. ``mean``) with columns
    ``model, dataset, aggregator, seed, step, benchmark, acc@8, best@8, best@8_bootstrap, unparsable_golds``;
    only steps where every campaign benchmark and the mean are present. ``train``: one row per (cell, logged step) with
    ``model, dataset, aggregator, seed, step`` and every numeric metric of ``metrics.jsonl``.
    ``grid``: the cells the campaign should hold; ``cells``: those with a folder.
    """

    root: Path
    grid: tuple[Cell, ...]
    cells: dict[Cell, CellFolder]
    evals: pd.DataFrame
    train: pd.DataFrame
    benchmarks: tuple[str, ...]
    problems: list[Problem]
    models: tuple[str, ...]
    datasets: tuple[str, ...]
    aggregators: tuple[str, ...]
    seeds: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.root.name

    def settings(self) -> list[tuple[str, str]]:
        """The (model, dataset) training settings of the grid, in display order."""
        return [(m, d) for m in self.models for d in self.datasets]

    def group_keys(self, model: str, dataset: str, aggregator: str) -> list[Cell]:
        """The grid's cells (seeds) of one (model, dataset, aggregator), found or not."""
        return [k for k in self.grid if (k.model, k.dataset, k.aggregator) == (model, dataset, aggregator)]

    def problems_for(self, model: str, dataset: str, aggregator: str | None = None) -> list[Problem]:
        return [p for p in self.problems if p.cell is not None and p.cell.model == model
                and p.cell.dataset == dataset and (aggregator is None or p.cell.aggregator == aggregator)]

    def problem_report(self) -> str:
        """All problems, one per line (empty string when the campaign is complete)."""
        return "\n".join(str(p) for p in self.problems)


def aggregator_order(names: Iterable[str]) -> tuple[str, ...]:
    """Aggregators in the order of :data:`balagg.aggregation.rules.RULES` (unknown names last, sorted)."""
    from balagg.aggregation.rules import RULES

    def rank(name: str) -> tuple[int, str]:
        return (RULES.index(name) if name in RULES else len(RULES), name)

    return tuple(sorted(set(names), key=rank))


def cell_from_path(campaign_dir: Path, path: Path) -> Cell:
    """The cell a path belongs to: the grid's cell whose folder (:data:`balagg.layout.CELL_PATTERN`, read back
    by :meth:`Cell.parse`) holds it, right under the campaign folder."""
    try:
        parts = Path(path).resolve().relative_to(Path(campaign_dir).resolve()).parts
    except ValueError:
        raise ValueError(f"{path} is not inside campaign folder {campaign_dir}") from None
    cell = Cell.parse("/".join(parts[:4])) if len(parts) >= 4 and parts[0] not in CAMPAIGN_DIRS else None
    if cell is None:
        raise ValueError(f"{path} is not inside a cell folder {CELL_PATTERN} of {campaign_dir}")
    return cell


def discover_cells(campaign_dir: Path) -> list[Cell]:
    """Every cell folder (:data:`balagg.layout.CELL_PATTERN`) under ``campaign_dir``."""
    root = Path(campaign_dir)
    found = (Cell.parse(folder.relative_to(root).as_posix()) for folder in root.glob("*/*/*/*")
             if folder.is_dir() and folder.parts[-4] not in CAMPAIGN_DIRS)
    return sorted(cell for cell in found if cell is not None)


def _step_dirs(folder: Path) -> dict[int, Path]:
    if not folder.is_dir():
        return {}
    return {step: p for p in folder.iterdir()
            if p.is_dir() and (step := parse_step_dirname(p.name)) is not None}


def _manifest_steps(manifest: dict) -> set[int]:
    """Checkpoint steps listed in ``manifest.json`` (``checkpoints: [{"step": N, "path": ...}]``,
    docs/files.md)."""
    return {int(entry["step"]) for entry in manifest.get("checkpoints", [])}


def _finite(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number


def read_curve(path: Path) -> list[dict]:
    """The rows of an ``eval/curve.csv`` (a cell's or an external checkpoint's): step, benchmark and the
    metrics, a ValueError naming the file if it lacks the analysis' columns."""
    return _read_curve(path)


def _read_curve(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        missing = [c for c in _CURVE_COLUMNS if c not in columns]
        n = samples_of_columns(columns)
        if missing and n is not None and n != PAPER_SAMPLES:
            raise ValueError(f"{path}: scored with n={n} samples per problem; the analysis reports "
                             f"{' and '.join(REQUIRED_METRICS)} (evaluate with n={PAPER_SAMPLES})")
        if missing:
            raise ValueError(f"{path}: missing columns {missing} (docs/files.md: {','.join(_CURVE_COLUMNS)},...)")
        return [{"step": int(row["step"]), "benchmark": row["benchmark"],
                 **{m: _finite(row.get(m)) for m in (*METRICS, UNPARSABLE_GOLDS)}} for row in reader]


def _read_summary(path: Path) -> list[dict]:
    summary = json.loads(path.read_text())
    if isinstance(summary, dict) and summary.get("n", PAPER_SAMPLES) != PAPER_SAMPLES:
        raise ValueError(f"scored with n={summary['n']} samples per problem; the analysis reports "
                         f"{' and '.join(REQUIRED_METRICS)}")
    return [{"step": row["step"], "benchmark": row["benchmark"],
             **{m: _finite(row[m]) for m in (*METRICS, UNPARSABLE_GOLDS)}} for row in summary_rows(summary)]


def _read_metrics(path: Path, key: Cell, problems: list[Problem]) -> list[dict]:
    rows, skipped = [], []
    for number, record in read_jsonl_lines(path, bad_lines="skip", skipped=skipped):
        try:
            step = int(record["step"])
        except (KeyError, TypeError, ValueError):
            skipped.append(number)
            continue
        row = {name: float(v) for name, v in record.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and name != "step"}
        rows.append({"step": step, **row})
    bad = len(skipped)
    if bad:
        problems.append(Problem("bad-file", f"{path}: skipped {bad} unreadable line(s)", key))
    return rows


def _load_cell_evals(cell: CellFolder, problems: list[Problem]) -> list[dict]:
    """Rows of one cell's curve and summaries, keyed by step (curve.csv wins for steps it has)."""
    eval_dir = cell.path / EVAL_DIR
    rows: list[dict] = []
    curve = eval_dir / CURVE_FILE
    if curve.is_file():
        try:
            rows = _read_curve(curve)
        except (ValueError, KeyError) as error:
            problems.append(Problem("bad-file", str(error), cell.key))
    in_curve = {r["step"] for r in rows}
    for step, folder in sorted(_step_dirs(eval_dir).items()):
        summary = folder / SUMMARY_FILE
        if step in in_curve or not summary.is_file():
            continue
        try:
            rows.extend(_read_summary(summary))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as error:
            problems.append(Problem("bad-file", f"{summary}: unreadable ({error})", cell.key, step))
    return rows


def _scan_cell(key: Cell, path: Path, problems: list[Problem]) -> tuple[CellFolder, list[dict], list[dict]]:
    cell = CellFolder(key, path)
    cell.expected_steps |= set(_step_dirs(path / TRAIN_DIR / CHECKPOINTS_DIR))
    cell.expected_steps |= set(_step_dirs(path / EVAL_DIR))
    manifest = path / CELL_MANIFEST_FILE
    if manifest.is_file():
        cell.has_manifest = True
        try:
            cell.expected_steps |= _manifest_steps(json.loads(manifest.read_text()))
        except (json.JSONDecodeError, TypeError, ValueError, AttributeError) as error:
            problems.append(Problem("bad-file", f"{manifest}: unreadable ({error})", key))
    eval_rows = _load_cell_evals(cell, problems)
    metrics_path = path / TRAIN_DIR / METRICS_FILE
    train_rows = _read_metrics(metrics_path, key, problems) if metrics_path.is_file() else []
    cell.has_train_metrics = bool(train_rows)
    if not train_rows:
        problems.append(Problem("no-train-metrics", "train/metrics.jsonl missing or empty", key))
    return cell, eval_rows, train_rows


def _complete_steps(cell: CellFolder, rows: list[dict], benchmarks: Sequence[str],
                    problems: list[Problem]) -> list[dict]:
    """Keep the rows of steps holding every benchmark and the mean with finite values; report the rest."""
    by_step: dict[int, dict[str, dict]] = {}
    for row in rows:
        by_step.setdefault(row["step"], {})[row["benchmark"]] = row
    kept = []
    for step in sorted(by_step):
        present = by_step[step]
        lacking = [b for b in (*benchmarks, MEAN)
                   if b not in present or not all(math.isfinite(present[b][m]) for m in REQUIRED_METRICS)]
        if lacking:
            problems.append(Problem("incomplete-step", f"evaluation lacks {', '.join(lacking)}; step left out",
                                    cell.key, step))
            continue
        kept.extend(present[b] for b in (*benchmarks, MEAN))
        cell.evaluated_steps.add(step)
    for step in sorted(cell.expected_steps - set(by_step)):
        problems.append(Problem("missing-checkpoint", "checkpoint or eval folder exists but no evaluation summary",
                                cell.key, step))
    return kept


def load_results(campaign_dir: str | Path, cells: Iterable[str | Path] | None = None) -> CampaignResults:
    """Read a campaign folder's results.

    ``cells``: paths inside (or equal to) the cell folders that make up the grid, e.g. the curve files a
    workflow rule receives; default: every cell folder found. The grid is the given cells, or the
    product of the discovered models, datasets, aggregators and seeds; grid cells without a folder are
    ``missing-cell`` problems. Raises ``ValueError`` when the folder holds no cell at all.
    """
    root = Path(campaign_dir)
    if not root.is_dir():
        raise ValueError(f"campaign folder {root} does not exist")
    if cells is not None:
        grid = sorted({cell_from_path(root, Path(p)) for p in cells})
        found = [k for k in grid if (root / k.relpath).is_dir()]
    else:
        found = discover_cells(root)
        grid = sorted(Cell(m, d, a, s) for m in {k.model for k in found} for d in {k.dataset for k in found}
                      for a in {k.aggregator for k in found} for s in {k.seed for k in found})
    if not found:
        raise ValueError(f"no cell folders {CELL_PATTERN} under {root}")

    problems: list[Problem] = [Problem("missing-cell", "no cell folder", key) for key in grid if key not in set(found)]
    scanned = {key: _scan_cell(key, root / key.relpath, problems) for key in found}
    benchmarks = benchmark_order({r["benchmark"] for _, rows, _ in scanned.values() for r in rows})

    eval_rows, train_rows, cell_map = [], [], {}
    for key, (cell, rows, metrics) in scanned.items():
        coords = {"model": key.model, "dataset": key.dataset, "aggregator": key.aggregator, "seed": key.seed}
        eval_rows.extend({**coords, **row} for row in _complete_steps(cell, rows, benchmarks, problems))
        train_rows.extend({**coords, **row} for row in metrics)
        if cell.failed:
            state = "training unfinished (no manifest.json)" if not cell.has_manifest else "training finished"
            problems.append(Problem("failed-cell", f"no complete evaluation in eval/ ({state})", key))
        elif not cell.has_manifest:
            problems.append(Problem("unfinished-training", "no manifest.json: training may not have finished, "
                                    "so its last evaluated step may not be the last step", key))
        cell_map[key] = cell

    coord_columns = ["model", "dataset", "aggregator", "seed"]
    evals = pd.DataFrame(eval_rows, columns=[*coord_columns, "step", "benchmark", *METRICS, UNPARSABLE_GOLDS])
    train = pd.DataFrame(train_rows)
    if train.empty:
        train = pd.DataFrame(columns=[*coord_columns, "step"])
    train = train.sort_values([*coord_columns, "step"]).drop_duplicates([*coord_columns, "step"], keep="last")
    problems.sort(key=lambda p: (p.cell or Cell("", "", "", -1), p.step if p.step is not None else -1, p.kind))
    return CampaignResults(
        root=root,
        grid=tuple(grid),
        cells=cell_map,
        evals=evals.sort_values([*coord_columns, "step"]).reset_index(drop=True),
        train=train.reset_index(drop=True),
        benchmarks=benchmarks,
        problems=problems,
        models=tuple(sorted({k.model for k in grid})),
        datasets=tuple(sorted({k.dataset for k in grid})),
        aggregators=aggregator_order(k.aggregator for k in grid),
        seeds=tuple(sorted({k.seed for k in grid})),
    )
