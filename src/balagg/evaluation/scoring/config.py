"""How ``score`` scores (:class:`ScoreConfig`), declared once: ``python -m balagg score``'s flags and the
workflow's score command lines are generated from it (:mod:`balagg.config_flags`). Light to import: every
command line is parsed with it."""

from __future__ import annotations

from dataclasses import dataclass

from balagg import settings
from balagg.config_schema import Checked, setting, setting_of
from balagg.evaluation.verify.sandbox import SandboxLimits
from balagg.prompts import ANSWER_FORMATS


@dataclass
class ScoreConfig(Checked):
    """How to score. The flags of ``python -m balagg score`` are generated from these fields
    (:mod:`balagg.config_flags`), and so are the flags the workflow gives it (the eval section's)."""

    config_name = "score"

    workers: int = setting_of(settings.VerifierDefaults, "workers")
    math_timeout_s: float = setting_of(settings.VerifierDefaults, "math_timeout_s", "seconds per math sample",
                                       aliases=("--math-timeout",))
    code_timeout_s: float = setting_of(settings.VerifierDefaults, "code_timeout_s", aliases=("--code-timeout",))
    pass_ks: tuple[int, ...] = setting((), "also report unbiased pass@k, e.g. 1,2,4 (k <= n)", minimum=1,
                                       aliases=("--pass-k",))
    allow_missing: bool = setting(
        False, "score even if some benchmark problems have no generations (they are left out)")
    sandbox_limits: SandboxLimits | None = setting(None, "the code sandbox's limits (default: its own)",
                                                   in_flags=False)
    answer_format: str | None = setting(
        None, "math answer extraction (default: generation.json's, what the prompt asked for)", choices=ANSWER_FORMATS)
    strict_golds: bool = setting(
        settings.EVAL.strict_golds, "stop at a gold answer the math verifier cannot parse (default: score that "
        "problem incorrect in every sample, count it in summary.json and name it at the end)")
