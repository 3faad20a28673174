"""The defaults the pipeline's stages share: verifier, evaluation, tiny world, analysis and data preparation.

The results layout is :mod:`balagg.layout`, the benchmarks and metric names :mod:`balagg.benchmarks`, the
prompts and the tokenizer :mod:`balagg.prompts`. Only the standard library is imported at module level.
"""

from __future__ import annotations

from dataclasses import dataclass

from balagg.benchmarks import PAPER_SAMPLES

# ---- shared defaults ------------------------------------------------------------------------------------
# The workflow schema (workflow/schemas/config.schema.yaml) states the same defaults; a test checks
# that they are equal, and every CLI flag defaults to the value here.

DEFAULT_VERIFIER = "balagg.evaluation.verify.math_verifier:verify_math"
"""``module:function`` of the math verifier: evaluation's scorer and training's reward."""


@dataclass(frozen=True)
class VerifierDefaults:
    """Math verification (evaluation and the training reward) and code tests (evaluation)."""

    verifier: str = DEFAULT_VERIFIER
    workers: int = 2  # verifier processes / concurrent sandboxes
    math_timeout_s: float = 10.0  # per sample: past it, the sample scores 0 and is counted
    code_timeout_s: float = 6.0  # wall-clock seconds per code test


@dataclass(frozen=True)
class EvalDefaults:
    """The workflow's ``eval`` section: sampling of ``generate`` and the code timeout of ``score``."""

    n: int = PAPER_SAMPLES
    temperature: float = 1.0
    top_p: float = 0.7
    max_tokens: int = 8192
    seed: int = 0
    batch_size: int = 64
    code_timeout_s: float = VerifierDefaults.code_timeout_s
    strict_golds: bool = False  # an unparsable benchmark gold stops scoring instead of scoring 0 and being counted
    jobs: str = "checkpoint"  # one generation and one scoring job per checkpoint, or per cell ("cell")


@dataclass(frozen=True)
class TinyWorldDefaults:
    """The workflow's ``tinyworld`` section (``tinyworld data`` and ``tinyworld model``)."""

    seed: int = 0
    train_problems: int = 2000
    bench_problems: int = 16
    sft_steps: int = 800
    sft_length_buckets: int = 1  # warm-start batches padded as one (1) or in this many length-sorted parts


@dataclass(frozen=True)
class AnalysisDefaults:
    """The workflow's ``analysis`` section (the scripts in analysis/)."""

    figure2_model: str | None = None
    paper_values: str | None = None
    smoothing: int = 5  # centred moving-average window of Figures 2 and 3, in logged steps
    cv_threshold: float = 0.5
    gap_threshold: float = 0.25


@dataclass(frozen=True)
class DataDefaults:
    """The workflow's ``data`` section (``prepare-data``)."""

    on_bad_row: str = "skip"


VERIFIER = VerifierDefaults()
EVAL = EvalDefaults()
TINYWORLD = TinyWorldDefaults()
ANALYSIS = AnalysisDefaults()
DATA = DataDefaults()
