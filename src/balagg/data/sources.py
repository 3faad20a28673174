"""The registry of data sources: name -> where the data lives on the hub and how to normalise a row.

Names are :data:`balagg.benchmarks.BENCHMARKS` (``math500`` ... ``livecodebench``, in that order) and
:data:`balagg.benchmarks.TRAINING_SETS` (``dapo-math-17k``, ``polaris-53k``). ``expected_rows`` is the size of the full normalised set
(None where it depends on options); ``prepare`` reports a mismatch but does not fail on it, since
local mirrors and test fixtures are subsets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from balagg.data import livecodebench, rows


@dataclass(frozen=True)
class Source:
    """One dataset: hub location, normaliser and the shape of its output records."""

    name: str
    role: str  # "benchmark" or "train"
    hub_id: str
    split: str
    subset: str | None
    normalise: Callable[..., dict | None]
    id_prefix: str
    kind: str = "math"  # benchmark kind (docs/files.md); "math" for training sets
    dedupe: bool = False  # drop later rows whose (problem, answer) repeats an earlier one
    expected_rows: int | None = None
    hub_file: str | None = None  # the data file inside the hub repo, when the repo has several
    note: str = ""


SOURCES: dict[str, Source] = {
    source.name: source
    for source in (
        Source("math500", "benchmark", "HuggingFaceH4/MATH-500", "test", None, rows.plain_math,
               "math500", expected_rows=500),
        Source("aime24", "benchmark", "HuggingFaceH4/aime_2024", "train", None, rows.plain_math,
               "aime24", expected_rows=30),
        Source("aime25", "benchmark", "yentinglin/aime_2025", "train", None, rows.plain_math,
               "aime25", expected_rows=30,
               note="AIME 2025 I+II as used by lighteval's aime25 task; same schema as aime_2024"),
        Source("olympiadbench", "benchmark", "Hothan/OlympiadBench", "train", "OE_TO_maths_en_COMP",
               rows.olympiadbench, "olympiadbench", expected_rows=675),
        Source("minerva", "benchmark", "math-ai/minervamath", "test", None, rows.minerva,
               "minerva", expected_rows=272,
               note="or QwenLM/Qwen2.5-Math evaluation/data/minerva_math/test.jsonl as a local file"),
        Source("livecodebench", "benchmark", "lighteval/code_generation_lite", "test", "release_v6",
               livecodebench.normalise_row, "livecodebench", kind="code",
               note="parquet re-upload of livecodebench/code_generation_lite (release_v6 runs to 2025-04, so "
                    "it covers the window); window default "
                    f"{livecodebench.DEFAULT_WINDOW[0]}..{livecodebench.DEFAULT_WINDOW[1]} (279 problems)"),
        Source("dapo-math-17k", "train", "BytedTsinghua-SIA/DAPO-Math-17k", "train", None, rows.dapo,
               "dapo", dedupe=True, hub_file="data/dapo-math-17k.parquet",
               note="the hub copy repeats each problem ~100 times; deduplicated on (problem, answer)"),
        Source("polaris-53k", "train", "POLARIS-Project/Polaris-Dataset-53K", "train", None,
               rows.plain_math, "polaris", expected_rows=53291),
    )
}



def get_source(name: str, role: str | None = None) -> Source:
    """The registered source ``name`` (of ``role`` if given), or a ValueError listing the choices."""
    choices = [n for n, s in SOURCES.items() if role is None or s.role == role]
    if name not in choices:
        what = {"benchmark": "benchmark", "train": "training set"}.get(role, "data source")
        raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(choices)}")
    return SOURCES[name]
