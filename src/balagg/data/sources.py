"""The registry of benchmarks and training sets: one record per source, and everything else about them is
derived from it -- the benchmark order and kinds (:mod:`balagg.benchmarks`), the campaign schema's
benchmark keys and training-set loaders (:mod:`balagg.campaign`), data preparation (:mod:`balagg.data.prepare`),
the fetch stage, the tiny world's copies (:mod:`balagg.tinyworld.raw`: their files and tasks).

A record names the source, its role (``benchmark`` or ``train``) and kind (``math``: a gold answer for the
math verifier; ``code``: tests run in the sandbox), where it lives on the hub, its row functions
(:mod:`balagg.data.rows`: the normaliser of a raw row, the writer of a synthetic one) and the tiny world's
copy. Benchmarks are listed in the paper's order; files, summaries and tables keep it. ``expected_rows`` is
the size of the full normalised set (None where it depends on options); ``prepare`` reports a mismatch but
does not fail on it, since local mirrors and test fixtures are subsets.

Adding a benchmark is a record here and its pair of row functions (docs/design.md shows one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from balagg.data import livecodebench, rows
from balagg.tinyworld.tasks import ArithmeticTask

ROLES = ("benchmark", "train")
KINDS = ("math", "code")


@dataclass(frozen=True)
class TinyWorld:
    """The tiny world's copy of a source (:mod:`balagg.tinyworld.raw`): the file inside its mirror folder
    (where the hub repository has it, so the real loader reads the copy as the hub's), and, for a math
    source, the arithmetic task its problems are drawn from in the chains family (a code benchmark's are
    the tiny world's programs)."""

    file: str
    task: ArithmeticTask | None = None


@dataclass(frozen=True)
class Source:
    """One benchmark or training set: hub location, row functions, kind, the tiny world's copy."""

    name: str
    role: str  # "benchmark" or "train"
    hub_id: str
    split: str
    subset: str | None
    normalise: Callable[..., dict | None]  # raw row -> record (balagg.data.rows)
    raw_row: Callable[..., dict]  # synthetic problem -> raw row, the tiny world's (balagg.data.rows)
    id_prefix: str
    tinyworld: TinyWorld
    kind: str = "math"  # benchmark kind (docs/files.md); "math" for training sets
    dedupe: bool = False  # drop later rows whose (problem, answer) repeats an earlier one
    expected_rows: int | None = None
    hub_file: str | None = None  # the data file inside the hub repo, when the repo has several
    note: str = ""

    def __post_init__(self) -> None:
        if self.role not in ROLES or self.kind not in KINDS:
            raise ValueError(f"source {self.name}: role must be one of {ROLES} and kind one of {KINDS}")
        if (self.kind == "math") != (self.tinyworld.task is not None):
            raise ValueError(f"source {self.name}: a math source's tiny-world copy needs its task, a code one none")


# The tiny world's chain tasks (balagg.tinyworld.tasks): the training sets' two length profiles, and the
# benchmarks: in-distribution (math500), hard (aime24/25), the Evaluate task (olympiadbench), easy chains
# (minerva).
_COMPUTE = ArithmeticTask("Compute", {1: 1, 2: 1, 3: 1, 4: 1}, error_style="long", p_wrong=0.2)
_EVALUATE = ArithmeticTask("Evaluate", {1: 0.25, 2: 0.2, 3: 0.2, 4: 0.2, 5: 0.15}, error_style="short", p_wrong=0.3)

SOURCES: dict[str, Source] = {
    source.name: source
    for source in (
        Source("math500", "benchmark", "HuggingFaceH4/MATH-500", "test", None, rows.plain_math, rows.raw_math500,
               "math500", TinyWorld("test.jsonl", _COMPUTE), expected_rows=500),
        Source("aime24", "benchmark", "HuggingFaceH4/aime_2024", "train", None, rows.plain_math,
               rows.raw_aime("aime24", "2024"), "aime24",
               TinyWorld("data/train-00000-of-00001.parquet", ArithmeticTask("Compute", {4: 1}, "long", 0.0)),
               expected_rows=30),
        Source("aime25", "benchmark", "yentinglin/aime_2025", "train", None, rows.plain_math,
               rows.raw_aime("aime25", "2025"), "aime25",
               TinyWorld("data/train-00000-of-00001.parquet", ArithmeticTask("Evaluate", {4: 1, 5: 1}, "short", 0.0)),
               expected_rows=30, note="AIME 2025 I+II as used by lighteval's aime25 task; same schema as aime_2024"),
        Source("olympiadbench", "benchmark", "Hothan/OlympiadBench", "train", "OE_TO_maths_en_COMP",
               rows.olympiadbench, rows.raw_olympiadbench, "olympiadbench",
               TinyWorld("OE_TO_maths_en_COMP/train-00000-of-00001.parquet",
                         ArithmeticTask("Evaluate", {2: 1, 3: 1, 4: 1}, "short", 0.0)),
               expected_rows=675),
        Source("minerva", "benchmark", "math-ai/minervamath", "test", None, rows.minerva, rows.raw_minerva,
               "minerva", TinyWorld("test.jsonl", ArithmeticTask("Compute", {1: 1, 2: 1, 3: 1}, "long", 0.0)),
               expected_rows=272,
               note="or QwenLM/Qwen2.5-Math evaluation/data/minerva_math/test.jsonl as a local file"),
        Source("livecodebench", "benchmark", "lighteval/code_generation_lite", "test", "release_v6",
               livecodebench.normalise_row, livecodebench.raw_row, "livecodebench",
               TinyWorld("release_v6/test-00000-of-00001.parquet"), kind="code",
               note="parquet re-upload of livecodebench/code_generation_lite (release_v6 runs to 2025-04, so "
                    "it covers the window); window default "
                    f"{livecodebench.DEFAULT_WINDOW[0]}..{livecodebench.DEFAULT_WINDOW[1]} (279 problems)"),
        Source("dapo-math-17k", "train", "BytedTsinghua-SIA/DAPO-Math-17k", "train", None, rows.dapo, rows.raw_dapo,
               "dapo", TinyWorld("data/dapo-math-17k.parquet", _COMPUTE), dedupe=True,
               hub_file="data/dapo-math-17k.parquet",
               note="the hub copy repeats each problem ~100 times; deduplicated on (problem, answer)"),
        Source("polaris-53k", "train", "POLARIS-Project/Polaris-Dataset-53K", "train", None, rows.plain_math,
               rows.raw_polaris, "polaris", TinyWorld("polaris-53k.jsonl", _EVALUATE), expected_rows=53291),
    )
}
"""Every source: the benchmarks in the paper's order, then the training sets."""


def names(role: str, kind: str | None = None) -> tuple[str, ...]:
    """The registry's sources of ``role`` (and ``kind``), in its order."""
    return tuple(name for name, source in SOURCES.items()
                 if source.role == role and (kind is None or source.kind == kind))


def tinyworld_tasks(role: str) -> dict[str, ArithmeticTask]:
    """{name: the tiny world's chain task} of the math sources of ``role``, in the registry's order."""
    return {name: SOURCES[name].tinyworld.task for name in names(role, "math")}


def get_source(name: str, role: str | None = None) -> Source:
    """The registered source ``name`` (of ``role`` if given), or a ValueError listing the choices."""
    choices = [n for n, s in SOURCES.items() if role is None or s.role == role]
    if name not in choices:
        what = {"benchmark": "benchmark", "train": "training set"}.get(role, "data source")
        raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(choices)}")
    return SOURCES[name]
