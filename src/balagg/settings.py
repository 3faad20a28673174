"""The defaults of the workflow's ``eval``, ``tinyworld``, ``analysis`` and ``data`` sections and of
verification, declared once: each section's schema properties are generated from its dataclass
(:mod:`balagg.config_schema`), and the commands and functions these settings reach default to the same
values (``EVAL.top_p``, ``TINYWORLD.sft_steps``, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from balagg.config_schema import Checked, setting, setting_of
from balagg.benchmarks import PAPER_SAMPLES

DEFAULT_VERIFIER = "balagg.evaluation.verify.math_verifier:verify_math"
"""``module:function`` of the math verifier: evaluation's scorer and training's reward."""


@dataclass(frozen=True)
class VerifierDefaults(Checked):
    """Math verification (evaluation and the training reward) and code tests (evaluation)."""

    config_name = "verifier"

    verifier: str = setting(DEFAULT_VERIFIER, "module:function of the math verifier")
    workers: int = setting(2, "verifier processes / concurrent sandboxes", minimum=1)
    math_timeout_s: float = setting(10.0, "per sample: past it, the sample scores 0 and is counted",
                                    exclusive_minimum=0)
    # 6, not 6.0: the workflow's score commands pass the eval section's value on as written (--code-timeout-s 6)
    code_timeout_s: float = setting(6, "wall-clock seconds per code test", exclusive_minimum=0)


@dataclass(frozen=True)
class EvalDefaults(Checked):
    """The workflow's ``eval`` section: sampling of ``generate`` and the code timeout of ``score``."""

    config_name = "eval"

    n: int = setting(PAPER_SAMPLES, "samples per problem; Table 1 and Figure 1 report Acc@8 and Best@8",
                     const=PAPER_SAMPLES)
    temperature: float = setting(1.0, minimum=0)
    top_p: float = setting(0.7, exclusive_minimum=0, maximum=1)
    max_tokens: int = setting(8192, minimum=1)
    seed: int = setting(0, minimum=0)
    batch_size: int = setting(64, "prompts per transformers generate batch (CPU path)", minimum=1)
    code_timeout_s: float = setting_of(VerifierDefaults, "code_timeout_s")
    strict_golds: bool = setting(
        False, "stop scoring at a benchmark problem whose gold answer the math verifier cannot parse; by default "
        "such a problem is scored incorrect in every sample (as lighteval scores it), counted per benchmark in "
        "summary.json and named in Table 1's notes")


@dataclass(frozen=True)
class TinyWorldDefaults(Checked):
    """The workflow's ``tinyworld`` section (``tinyworld data`` and ``tinyworld model``)."""

    config_name = "tinyworld"

    seed: int = setting(0, minimum=0)
    train_problems: int = setting(2000, minimum=8)
    bench_problems: int = setting(16, minimum=1)
    sft_steps: int = setting(800, minimum=0)
    sft_length_buckets: int = setting(
        1, "each warm-start batch is split into this many parts by length, each padded to its own longest "
        "example, and the gradient is accumulated over the batch's token count: the same update up to float "
        "rounding, with less padding (docs/performance.md, bench/tinyworld.py: what it saves). 1 pads the batch "
        "as one, as the laboratory's measured models were built.", minimum=1, maximum=8)


@dataclass(frozen=True)
class AnalysisDefaults(Checked):
    """The workflow's ``analysis`` section (the scripts in analysis/)."""

    config_name = "analysis"

    figure2_model: str | None = setting(None, "model of Figure 2 (default the first model)")
    paper_values: str | None = setting(
        None, "CSV of the paper's published Table 1 values to put beside ours (analysis/paper_values.csv)")
    smoothing: int = setting(5, "moving-average window of Figures 2 and 3, in logged steps", minimum=1)
    cv_threshold: float = setting(0.5, "diagnosis: length CV counted as high (our threshold)", minimum=0)
    gap_threshold: float = setting(0.25, "diagnosis: |pos-neg gap| / mean length counted as large (ours)",
                                   minimum=0)


@dataclass(frozen=True)
class DataDefaults(Checked):
    """The workflow's ``data`` section (``prepare-data``)."""

    config_name = "data"

    on_bad_row: str = setting("skip", "malformed source rows are counted and skipped, or stop the run",
                              choices=("skip", "fail"))


VERIFIER = VerifierDefaults()
EVAL = EvalDefaults()
TINYWORLD = TinyWorldDefaults()
ANALYSIS = AnalysisDefaults()
DATA = DataDefaults()
