"""Write the tiny world's datasets in the *raw* schemas and file layouts of the real ones.

Each dataset is a folder ``{out}/{name}/`` laid out like a local mirror of its hub repository, so
``balagg.data.prepare(name, f"{out}/{name}", ...)`` (the real loaders) reads it unchanged:

| name            | file (inside ``{out}/{name}/``)                  | real source, schema                       |
|-----------------|--------------------------------------------------|-------------------------------------------|
| dapo-math-17k   | ``data/dapo-math-17k.parquet``                   | BytedTsinghua-SIA/DAPO-Math-17k           |
| polaris-53k     | ``polaris-53k.jsonl``                            | POLARIS-Project/Polaris-Dataset-53K       |
| math500         | ``test.jsonl``                                   | HuggingFaceH4/MATH-500                    |
| aime24          | ``data/train-00000-of-00001.parquet``            | HuggingFaceH4/aime_2024                   |
| aime25          | ``data/train-00000-of-00001.parquet``            | yentinglin/aime_2025 (aime_2024's schema) |
| olympiadbench   | ``OE_TO_maths_en_COMP/train-00000-of-00001.parquet`` | Hothan/OlympiadBench                  |
| minerva         | ``test.jsonl``                                   | Qwen2.5-Math minerva_math/test.jsonl      |
| livecodebench   | ``release_v6/test-00000-of-00001.parquet``       | lighteval/code_generation_lite            |

``{out}/manifest.json`` lists every dataset (path, format, hub id, split, subset, rows, sha256), the
seed, the family and the generator settings. Row contents depend only on ``seed``, the sizes and the
*family* (:data:`FAMILIES`): arithmetic chains, or the walks of one walk world
(``balagg.tinyworld.walks.WORLDS``) in the training sets and the five math benchmarks.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import pickle
import random
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from balagg import settings
from balagg.data.rows import DAPO_PREFIX, DAPO_SUFFIX
from balagg.data.sources import SOURCES
from balagg.io import atomic_path, atomic_write_text, read_jsonl
from balagg.layout import RAW_MANIFEST_FILE, TINYWORLD_DEFAULT_FAMILY, TINYWORLD_FAMILIES
from balagg.tinyworld import walks
from balagg.tinyworld.tasks import (
    BENCH_TASKS,
    NOMINAL_PASS_RATE,
    TRAIN_TASKS,
    ArithmeticTask,
    sample_code_problem,
    worked_solution,
)

LAYOUT: dict[str, dict] = {
    name: {"path": path, "hub_id": SOURCES[name].hub_id, "split": SOURCES[name].split,
           "subset": SOURCES[name].subset, "role": "train" if SOURCES[name].role == "train" else "benchmark"}
    for name, path in {
        "dapo-math-17k": "data/dapo-math-17k.parquet",
        "polaris-53k": "polaris-53k.jsonl",
        "math500": "test.jsonl",
        "aime24": "data/train-00000-of-00001.parquet",
        "aime25": "data/train-00000-of-00001.parquet",
        "olympiadbench": f"{SOURCES['olympiadbench'].subset}/train-00000-of-00001.parquet",
        "minerva": "test.jsonl",
        "livecodebench": f"{SOURCES['livecodebench'].subset}/test-00000-of-00001.parquet",
    }.items()
}
"""Where each raw dataset lies inside its mirror folder (as in the hub repository); hub id, split and
subset come from balagg.data's registry, so the real loaders read the mirror exactly as the hub copy."""

LCB_FIRST_DATE = dt.datetime(2024, 8, 1)
"""Synthetic contest dates start here and stay inside LiveCodeBench's default window (2024-08-01 to
2025-02-01, balagg.data.livecodebench.DEFAULT_WINDOW)."""


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

WALK_BENCHMARKS = ("math500", "aime24", "aime25", "olympiadbench", "minerva")
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
    """``n`` problems of dataset ``name`` (a TRAIN_TASKS or BENCH_TASKS key) in ``family``, drawn from
    ``rng`` (default: the dataset's own stream). Chains: the dataset's own task, distinct expressions.
    Walks: a training set is at most the family's whole space (83 problems in both walk worlds), each
    problem once; the benchmarks get disjoint slices of one shuffle, at most 16 problems each
    (:func:`walks.dealt_walks`)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown tiny-world family {family!r}; use one of {', '.join(FAMILIES)}")
    rng = rng or _rng(seed, name)
    if family in walks.WORLDS:
        world = walks.WORLDS[family]
        drawn = (walks.sample_walks(rng, n, world) if name in TRAIN_TASKS
                 else walks.dealt_walks(seed, WALK_BENCHMARKS.index(name), len(WALK_BENCHMARKS), n, world))
        return [Problem(w.problem, w.answer, w.solution, w.n_steps) for w in drawn]
    task = TRAIN_TASKS.get(name) or BENCH_TASKS[name]
    return [Problem(task.problem(c), c.answer, worked_solution(c), c.n_steps) for c in _chains(task, rng, n)]


def dapo_rows(seed: int, n: int, family: str = "chains") -> list[dict]:
    """DAPO-Math-17k: data_source, prompt (one user message with DAPO's wrapper), ability, reward_model
    {ground_truth, style}, extra_info {index} (uuids from the stream that drew the problems)."""
    rng = _rng(seed, "dapo-math-17k")
    rows = []
    for problem in _problems("dapo-math-17k", seed, n, family, rng):
        rows.append({
            "data_source": "math_dapo",
            "prompt": [{"content": DAPO_PREFIX + problem.text + DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": str(problem.answer), "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": str(uuid.UUID(int=rng.getrandbits(128), version=4))},
        })
    return rows


def polaris_rows(seed: int, n: int, family: str = "chains") -> list[dict]:
    """Polaris-Dataset-53K: problem, answer, difficulty (a pass rate ``k/8``, nominal here)."""
    return [{"problem": p.text, "answer": str(p.answer), "difficulty": NOMINAL_PASS_RATE[p.n_steps]}
            for p in _problems("polaris-53k", seed, n, family)]


def math500_rows(seed: int, n: int, family: str = "chains") -> list[dict]:
    """MATH-500: problem, solution, answer, subject, level (1-5), unique_id."""
    return [{"problem": p.text, "solution": p.solution, "answer": str(p.answer),
             "subject": "Prealgebra", "level": p.n_steps, "unique_id": f"test/prealgebra/{i}.json"}
            for i, p in enumerate(_problems("math500", seed, n, family))]


def _aime_rows(name: str, year: str):
    def rows(seed: int, n: int, family: str = "chains") -> list[dict]:
        """AIME (HuggingFaceH4/aime_2024 schema): id, problem, solution, answer, url, year."""
        return [{"id": i, "problem": p.text, "solution": p.solution, "answer": str(p.answer),
                 "url": f"https://example.invalid/tinyworld/{name}/{i}", "year": year}
                for i, p in enumerate(_problems(name, seed, n, family))]
    return rows


def olympiadbench_rows(seed: int, n: int, family: str = "chains") -> list[dict]:
    """OlympiadBench OE_TO_maths_en_COMP: id, question, solution (list), final_answer (list of str),
    context, image_1..5, is_multiple_answer, unit, answer_type, subfield, subject, language, error,
    question_type."""
    rows = []
    for i, p in enumerate(_problems("olympiadbench", seed, n, family)):
        rows.append({
            "id": 1000 + i, "question": p.text, "solution": [p.solution],
            "final_answer": [str(p.answer)], "context": None,
            **{f"image_{k}": None for k in range(1, 6)},
            "is_multiple_answer": False, "unit": None, "answer_type": "Numerical", "subfield": "Algebra",
            "subject": "Math", "language": "English", "error": None, "question_type": "Open-ended",
        })
    return rows


def minerva_rows(seed: int, n: int, family: str = "chains") -> list[dict]:
    """Minerva-MATH: problem, solution (gold = its last ``\\boxed{}``), type, idx."""
    return [{"problem": p.text, "solution": p.solution, "type": "Arithmetic", "idx": i}
            for i, p in enumerate(_problems("minerva", seed, n, family))]


def encode_private_tests(tests: list[dict]) -> str:
    """LiveCodeBench's encoding of private tests: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def livecodebench_rows(seed: int, n: int, family: str = "chains") -> list[dict]:
    """LiveCodeBench code generation (parquet copy): question_title, question_content, platform,
    question_id, contest_id, contest_date, starter_code, difficulty, public_test_cases (JSON),
    private_test_cases (encoded), metadata (JSON with func_name for call-based problems). The same in
    every family."""
    rng = _rng(seed, "livecodebench")
    rows, seen = [], set()
    while len(rows) < n:
        problem = sample_code_problem(rng)
        if problem.question in seen:
            continue
        seen.add(problem.question)
        i = len(rows)
        xs = rng.sample(range(-20, 21), 6)
        rows.append({
            "question_title": f"Chain {i}",
            "question_content": problem.question,
            "platform": "leetcode" if problem.call_based else "atcoder",
            "question_id": f"tw{i:04d}",
            "contest_id": f"tinyworld-{i // 4:03d}",
            "contest_date": (LCB_FIRST_DATE + dt.timedelta(days=1 + i % 180)).isoformat(),
            "starter_code": problem.starter_code,
            "difficulty": "easy",
            "public_test_cases": json.dumps([problem.test(x) for x in xs[:2]]),
            "private_test_cases": encode_private_tests([problem.test(x) for x in xs[2:]]),
            "metadata": json.dumps({"func_name": "calc"} if problem.call_based else {}),
        })
    return rows


ROW_BUILDERS: dict[str, Callable[[int, int, str], list[dict]]] = {
    "dapo-math-17k": dapo_rows,
    "polaris-53k": polaris_rows,
    "math500": math500_rows,
    "aime24": _aime_rows("aime24", "2024"),
    "aime25": _aime_rows("aime25", "2025"),
    "olympiadbench": olympiadbench_rows,
    "minerva": minerva_rows,
    "livecodebench": livecodebench_rows,
}


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
        rows = ROW_BUILDERS[name](seed, size, family)
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
                   for name, t in TRAIN_TASKS.items()} if family == "chains" else
                  {"walk": {"mod": walks.WORLDS[family].mod, "lattice": walks.WORLDS[family].lattice,
                            "max_steps": walks.MAX_STEPS, "problems": len(walks.WORLDS[family].problems)}}),
        "datasets": datasets,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    atomic_write_text(out / RAW_MANIFEST_FILE, text)
    return json.loads(text)
