"""The math verifier shared by the trainer's reward and the evaluation: ``verify_math(text, gold) -> bool``.

Pinned verifier: **math-verify 0.5.2** (with latex2sympy2_extended 1.0.6), configured as lighteval 0.13's
math extractive-match metric (``Metrics.expr_gold_metric`` / ``latex_gold_metric``):

- gold extracted with ``[ExprExtractionConfig(), LatexExtractionConfig()]``;
- prediction extracted with ``[ExprExtractionConfig(), LatexExtractionConfig(boxed_match_priority=0)]``
  (a ``\\boxed{}`` answer outranks every other pattern; among equal priorities the *last* match wins);
- ``fallback_mode="first_match"``, ``extraction_mode="any_match"``, numeric precision 6 digits
  (``precision=6``), gold first in ``verify`` (the comparison is deliberately asymmetric).

Why this one version: lighteval 0.13.0 hard-pins ``latex2sympy2_extended==1.0.6`` and vendors a copy of
math-verify's extraction/comparison code; math-verify 0.5.2 is the only release that pins the same
latex2sympy2_extended, so the two co-install and score alike (``tests/test_math_verifier.py`` checks the
regression set against lighteval's own metric where lighteval is installed). Newer math-verify (0.6-0.9)
needs latex2sympy2_extended >= 1.0.9 and cannot share an environment with lighteval 0.13; 0.9.0 also
joins separate boxes (``\\boxed{12} ... \\boxed{204}`` parses as 12204). The trainer imports only
math-verify, not lighteval (whose hub<2 / xxhash<4 pins it need not carry).

Reasoning tags, one rule for every metric (:func:`balagg.prompts.strip_reasoning`): the answer is the text after the
last ``</think>``; an opened but never closed ``<think>`` (thinking cut off by the token limit) leaves
no answer, so it scores 0; text without think tags is scored whole.

Gold answers: a string (LaTeX without delimiters, e.g. ``\\frac{1}{2}``, or with ``$...$``/``\\boxed{}``),
or a list of strings (OlympiadBench ``final_answer``): a list of several answers is one answer set --
the prediction must give all of them (in any order), e.g. gold ``["3", "5"]`` accepts ``\\boxed{5, 3}``
but not ``\\boxed{3}``. Before extraction a gold is read as a reader reads it (:func:`gold_latex`):

- ``\\$`` is a dollar *sign*, not a math delimiter (MATH-500's ``\\$32,\\!348`` is 32348, as ``$\\$32,\\!348$``);
- ``$`` signs are delimiters when they pair up and leave only prose and punctuation outside
  (``$69$,$84$``, ``$(0, 1)$.``); otherwise they are stray typesetting -- an odd number (OlympiadBench's
  ``$221,$8$``) or math outside them (Minerva's ``a+$ $b``) -- dropped, and the answer wrapped once (a
  delimited reading from which math-verify extracts nothing falls back to that too);
- a trailing lone backslash (``\\textbf{(E)}\\``) is dropped;
- other text-mode escapes (``\\%``, ``\\,``, ``\\!``, ``\\text{...}`` units) are left to math-verify's
  normalisation, which reads them as a reader does (``8\\%`` is 8/100, ``5.4 \\text{ cents}`` is 5.4).

A gold that still yields nothing to compare with is *unparsable*: :func:`parse_gold` raises
``ValueError``, and the callers decide -- evaluation scores the problem incorrect and counts it (as
lighteval does), ``prepare-data`` drops such a training row (:func:`gold_is_parsable`).

Timeouts: math-verify 0.5.2 times parsing and comparison with ``signal.alarm``, which works only in a
process's main thread; elsewhere :func:`verify_math` raises ``RuntimeError`` rather than silently scoring
0. A hang inside a C call (e.g. a huge integer power) is not interrupted by a signal: callers that must
bound the time per sample run the verifier in a child process they can kill (see
``balagg.evaluation.verify.pool``).
"""

from __future__ import annotations

import logging
import re
import threading
from functools import lru_cache

from balagg.prompts import strip_reasoning

VERIFIER_NAME = "math-verify"
VERIFIER_VERSION = "0.5.2"
"""The pinned version; :func:`verifier_info` reports the installed one and refuses another."""

PRECISION = 6
"""Significant digits for numeric comparison (lighteval's math metrics use 6)."""

PARSE_TIMEOUT_S = 5
VERIFY_TIMEOUT_S = 5
"""Per-call signal.alarm budgets inside math-verify (lighteval uses 5 s for both)."""

_DELIMITED = re.compile(r"\\\(|\\\[|\\boxed")
_DOLLAR = re.compile(r"(?<!\\)\$")  # a math delimiter; ``\\$`` is a dollar sign
_TRAILING_BACKSLASH = re.compile(r"(?<!\\)\\$")
_MATH_SPAN = re.compile(r"(?<!\\)\$(?:\\.|[^$\\])*(?<!\\)\$")  # ``$...$`` (``$$...$$`` reads as two)
_MATH_CHAR = re.compile(r"[0-9\\^_{}=+\-*/<>()\[\]|]")


def gold_readings(gold: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The LaTeX snippets a gold answer can mean, in the order they are tried (module docstring): with
    its ``$`` signs as delimiters when they pair up, then (or only) with them dropped as stray and the
    answer wrapped in ``$...$``. A list of several answers is one comma-separated answer set ``$a, b$``."""
    if isinstance(gold, (list, tuple)):
        parts = [str(part).strip() for part in gold if str(part).strip()]
        if not parts:
            raise ValueError("gold answer list is empty")
        if len(parts) == 1:
            return gold_readings(parts[0])
        return ("$" + ", ".join(_math_text(part) for part in parts) + "$",)
    if not isinstance(gold, str):
        raise ValueError(f"gold answer must be a string or a list of strings, got {type(gold).__name__}")
    gold = _TRAILING_BACKSLASH.sub("", gold.strip()).strip()
    if not gold:
        raise ValueError("gold answer is empty")
    wrapped = f"${_math_text(gold)}$"
    if _DELIMITED.search(gold) or _delimits(gold):
        return (gold, wrapped)
    return (wrapped,)


def _delimits(text: str) -> bool:
    """True iff ``text``'s unescaped ``$`` signs pair up and leave outside them only prose and
    punctuation (``$a$``, ``$69$,$84$``, ``$(0, 1)$.``): math outside (``a+$ $b``) makes them stray."""
    dollars = len(_DOLLAR.findall(text))
    return dollars > 0 and dollars % 2 == 0 and not _MATH_CHAR.search(_MATH_SPAN.sub(" ", text))


def _math_text(part: str) -> str:
    """The math inside one answer, without delimiters: one enclosing pair (``$a$``, ``$$a$$``) removed,
    any other unescaped ``$`` dropped as stray (``\\$``, a dollar sign, kept); a trailing lone
    backslash dropped."""
    part = _TRAILING_BACKSLASH.sub("", part.strip()).strip()
    for fence in ("$$", "$"):
        inner = part[len(fence):-len(fence)]
        if len(part) > 2 * len(fence) and part.startswith(fence) and part.endswith(fence) \
                and not _DOLLAR.search(inner) and not inner.endswith("\\"):
            return inner.strip()
    return _DOLLAR.sub("", part).strip()


@lru_cache(maxsize=1)
def _math_verify():
    """Import math-verify once, check its version, and build the extraction configs."""
    from importlib import metadata  # here, not at import: data preparation and the registry import this module

    installed = metadata.version("math-verify")
    if installed != VERIFIER_VERSION:
        raise RuntimeError(f"balagg pins math-verify=={VERIFIER_VERSION}, found {installed}: "
                           "scores from another version are not comparable")
    import math_verify
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    # math-verify logs every unparsable snippet at WARNING; model output has many.
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)
    gold_config = [ExprExtractionConfig(), LatexExtractionConfig()]
    pred_config = [ExprExtractionConfig(), LatexExtractionConfig(boxed_match_priority=0)]
    return math_verify, gold_config, pred_config


@lru_cache(maxsize=4096)
def _parsed_reading(gold_text: str):
    math_verify, gold_config, _ = _math_verify()
    return math_verify.parse(gold_text, extraction_config=gold_config, parsing_timeout=PARSE_TIMEOUT_S)


def _first_reading(gold: str | list[str]) -> tuple[str, list]:
    readings = gold_readings(gold)
    for reading in readings:
        parsed = _parsed_reading(reading)
        if parsed:
            return reading, parsed
    return readings[0], []


def gold_latex(gold: str | list[str] | tuple[str, ...]) -> str:
    """The reading of ``gold`` the verifier compares with: the first of :func:`gold_readings` that
    math-verify extracts something from (the first reading if none does)."""
    return _first_reading(gold)[0]


def parse_gold(gold: str | list[str]) -> list:
    """The verifier's reading of a gold answer; ``ValueError`` if it finds nothing to compare with."""
    parsed = _first_reading(gold)[1]
    if not parsed:
        raise ValueError(f"gold answer {gold!r} cannot be parsed by {VERIFIER_NAME}")
    return parsed


def gold_is_parsable(gold) -> bool:
    """True iff :func:`parse_gold` reads ``gold`` (a string or a list of strings) without error."""
    try:
        parse_gold(gold)
    except ValueError:
        return False
    return True


def verify_math(text: str, gold: str | list[str]) -> bool:
    """True iff the model response ``text`` states the ``gold`` answer (see the module docstring)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("verify_math uses signal.alarm timeouts and must run in a process's main "
                           "thread; call it from a worker process")
    if not isinstance(text, str):
        raise ValueError(f"model output must be a string, got {type(text).__name__}")
    answer = strip_reasoning(text)
    if not answer.strip():
        return False
    gold_parsed = parse_gold(gold)
    math_verify, _, pred_config = _math_verify()
    pred_parsed = math_verify.parse(answer, extraction_config=pred_config, parsing_timeout=PARSE_TIMEOUT_S)
    if not pred_parsed:
        return False
    return bool(math_verify.verify(gold_parsed, pred_parsed, precision=PRECISION,
                                   timeout_seconds=VERIFY_TIMEOUT_S))


def warm_up() -> None:
    """Import math-verify and run one verification, so a worker's first real sample is not slowed by
    imports and parser set-up (the VerifierPool calls this before it starts any deadline)."""
    verify_math("$\\frac{1}{2}$", "0.5")


def verifier_info() -> dict[str, str]:
    """Name, version and configuration of the verifier, for ``summary.json`` and run metadata."""
    from importlib import metadata

    _math_verify()  # fails loudly if the installed version is not the pinned one
    return {
        "name": VERIFIER_NAME,
        "version": metadata.version("math-verify"),
        "latex2sympy2_extended": metadata.version("latex2sympy2_extended"),
        "config": (f"gold=[Expr,Latex]; pred=[Expr,Latex(boxed_match_priority=0)]; precision={PRECISION}; "
                   "answer after last </think>, unclosed <think> scores 0; list gold = answer set"),
    }
