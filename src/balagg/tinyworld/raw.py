"""Write the tiny world's datasets in the *raw* schemas and file layouts of the real ones.

Each dataset of the registry (:data:`balagg.data.sources.SOURCES`) is a folder ``{out}/{name}/`` laid out
like a local mirror of its hub repository, its one file where the record's ``tinyworld.file`` says
(``test.jsonl`` for MATH-500, ``data/dapo-math-17k.parquet`` for DAPO-Math-17k, ...), so
``balagg.data.prepare(name, f"{out}/{name}", ...)`` (the real loaders) reads it unchanged. Its rows are the
record's ``raw_row`` of synthetic problems: arithmetic chains of the record's task, the walks of one walk
world, or (the code benchmark) one-line programs.

``{out}/manifest.json`` lists every dataset (path, format, hub id, split, subset, rows, sha256), the
seed, the family and the generator settings. Row contents depend only on ``seed``, the sizes and the
*family* (:data:`FAMILIES`): arithmetic chains, or the walks of one walk world
(``balagg.tinyworld.walks.WORLDS``) in the training sets and the math benchmarks.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

from balagg import settings
from balagg.data.sources import SOURCES, names, tinyworld_tasks
from balagg.io import atomic_path, atomic_write_text, read_jsonl
from balagg.layout import TINYWORLD_MANIFEST_FILE, TINYWORLD_DEFAULT_FAMILY, TINYWORLD_FAMILIES
from balagg.tinyworld import walks
from balagg.tinyworld.tasks import ArithmeticTask, sample_code_problem, worked_solution

LAYOUT: dict[str, dict] = {
    name: {"path": source.tinyworld.file, "hub_id": source.hub_id, "split": source.split, "subset": source.subset,
           "role": source.role}
    for name, source in SOURCES.items()
}
"""Where each raw dataset lies inside its mirror folder (the registry's ``tinyworld.file``, as in the hub
repository), with its hub id, split and subset, so the real loaders read the mirror exactly as the hub copy."""


def _rng(seed: int, name: str) -> random.Random:
    """One independent stream per dataset, so changing one size leaves the others unchanged."""
    return random.Random(f"tinyworld-{name}-{seed}")


def _chains(task: ArithmeticTask, rng: random.Random, n: int):
    """``n`` problems of ``task`` with distinct expressions (the task space is small but >> n)."""
    seen, chains = set(), []
    attempts = 0
    while len(chains) < n:
        chain = task.sample(rng)
        attempts += 1
        if chain.expression in seen and attempts < 50 * n:
            continue
        seen.add(chain.expression)
        chains.append(chain)
    return chains


FAMILIES = TINYWORLD_FAMILIES
"""The tiny world's task families (a tiny model's is its warm start's): arithmetic chains
(balagg.tinyworld.tasks) or walks (balagg.tinyworld.walks.WORLDS) in the training sets and the math
benchmarks; the code benchmark is the same in every family."""

WALK_BENCHMARKS = names("benchmark", "math")
"""The math benchmarks in the order the walk family deals its problems out to them (disjoint slices)."""


def bench_size(family: str, name: str, n: int) -> int:
    """The rows benchmark ``name`` of ``family`` gets when ``n`` are asked (``bench_problems``): ``n``, but
    at most a disjoint slice of the walk space for a walk family's math benchmarks (walks.slice_size)."""
    if family in walks.WORLDS and name in WALK_BENCHMARKS:
        return walks.slice_size(n, len(WALK_BENCHMARKS), walks.WORLDS[family])
    return n


@dataclass(frozen=True)
class Problem:
    """What a dataset row is made of, in either family: the problem text, its integer answer, the worked
    solution and its number of steps."""

    text: str
    answer: int
    solution: str
    n_steps: int


def _problems(name: str, seed: int, n: int, family: str, rng: random.Random | None = None) -> list[Problem]:
    """``n`` problems of the registry's math dataset ``name`` in ``family``, drawn from
    ``rng`` (default: the dataset's own stream). Chains: the dataset's own task, distinct expressions.
    Walks: a training set is at most the family's whole space (83 problems in both walk worlds), each
    problem once; the benchmarks get disjoint slices of one shuffle, at most 16 problems each
    (:func:`walks.dealt_walks`)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown tiny-world family {family!r}; use one of {', '.join(FAMILIES)}")
    rng = rng or _rng(seed, name)
    if family in walks.WORLDS:
        world = walks.WORLDS[family]
        drawn = (walks.sample_walks(rng, n, world) if SOURCES[name].role == "train"
                 else walks.dealt_walks(seed, WALK_BENCHMARKS.index(name), len(WALK_BENCHMARKS), n, world))
        return [Problem(w.problem, w.answer, w.solution, w.n_steps) for w in drawn]
    task = SOURCES[name].tinyworld.task
    return [Problem(task.problem(c), c.answer, worked_solution(c), c.n_steps) for c in _chains(task, rng, n)]


def dataset_rows(name: str, seed: int, n: int, family: str = TINYWORLD_DEFAULT_FAMILY) -> list[dict]:
    """``n`` rows of the registry's dataset ``name`` in its raw schema (its ``raw_row``), drawn from the
    dataset's own stream: problems of ``family`` for a math dataset, then whatever the writer draws; the
    code benchmark's programs (the same in every family), distinct questions."""
    source, rng = SOURCES[name], _rng(seed, name)
    if source.kind == "code":
        rows, seen = [], set()
        while len(rows) < n:
            problem = sample_code_problem(rng)
            if problem.question in seen:
                continue
            seen.add(problem.question)
            rows.append(source.raw_row(problem, len(rows), rng))
        return rows
    return [source.raw_row(problem, i, rng) for i, problem in enumerate(_problems(name, seed, n, family, rng))]


def write_rows(rows: list[dict], path: Path) -> None:
    """Rows to ``.jsonl`` (one object per line) or ``.parquet`` (pyarrow), atomically."""
    if path.suffix == ".jsonl":
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        atomic_write_text(path, text)
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(rows)
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
    else:
        raise ValueError(f"unsupported raw file type {path.suffix!r}")


def read_rows(path: Path) -> list[dict]:
    """Inverse of :func:`write_rows` (for tests and the data card)."""
    if path.suffix == ".jsonl":
        return list(read_jsonl(path))
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_raw(out: str | os.PathLike, seed: int, train_problems: int = settings.TINYWORLD.train_problems,
              bench_problems: int = settings.TINYWORLD.bench_problems,
              names: tuple[str, ...] | None = None, family: str = TINYWORLD_DEFAULT_FAMILY) -> dict:
    """Write every dataset (or ``names``) of ``family`` under ``out`` and ``out/manifest.json`` (last);
    return it."""
    if train_problems < 1 or bench_problems < 1:
        raise ValueError("train_problems and bench_problems must be at least 1")
    if family not in FAMILIES:
        raise ValueError(f"unknown tiny-world family {family!r}; use one of {', '.join(FAMILIES)}")
    names = tuple(LAYOUT) if names is None else names
    unknown = [n for n in names if n not in LAYOUT]
    if unknown:
        raise ValueError(f"unknown tiny-world dataset(s) {unknown}; choose from {', '.join(LAYOUT)}")
    out = Path(out)
    datasets = {}
    for name in names:
        spec = LAYOUT[name]
        size = train_problems if spec["role"] == "train" else bench_problems
        rows = dataset_rows(name, seed, size, family)
        path = out / name / spec["path"]
        write_rows(rows, path)
        datasets[name] = {
            "dir": name, "path": f"{name}/{spec['path']}", "format": path.suffix.lstrip("."),
            "hub_id": spec["hub_id"], "split": spec["split"], "subset": spec["subset"], "role": spec["role"],
            "rows": len(rows), "sha256": _sha256(path),
        }
    manifest = {
        "seed": seed, "train_problems": train_problems, "bench_problems": bench_problems, "family": family,
        "tasks": ({name: {"verb": t.verb, "steps": {str(k): w for k, w in t.steps.items()}, "error_style": t.error_style, "p_wrong": t.p_wrong}
                   for name, t in tinyworld_tasks("train").items()} if family == "chains" else
                  {"walk": {"mod": walks.WORLDS[family].mod, "lattice": walks.WORLDS[family].lattice,
                            "max_steps": walks.MAX_STEPS, "problems": len(walks.WORLDS[family].problems)}}),
        "datasets": datasets,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    atomic_write_text(out / TINYWORLD_MANIFEST_FILE, text)
    return json.loads(text)
