"""The shared math verifier: the regression set's verdicts, reasoning tags, gold formats, guards."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import pytest

from balagg.evaluation.verify.math_verifier import gold_latex, strip_reasoning, verifier_info, verify_math

REGRESSION = Path(__file__).parent / "data" / "math_regression.jsonl"
CASES = [json.loads(line) for line in REGRESSION.read_text().splitlines() if line.strip()]


def test_regression_set_covers_the_required_kinds():
    assert len(CASES) >= 40
    notes = " ".join(case["note"] for case in CASES)
    for kind in ("\\frac12 vs 0.5", "3\\sqrt{13}", "x=5 vs 5", "degrees", "percents", "intervals", "text answers",
                 "OlympiadBench list", "several \\boxed{}", "no answer at all", "truncated answer"):
        assert kind in notes, kind
    assert {True, False} == {case["expected"] for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_regression_verdict(case):
    assert verify_math(case["text"], case["gold"]) is case["expected"]


@pytest.mark.skipif(importlib.util.find_spec("lighteval") is None, reason="lighteval not installed")
def test_regression_set_agrees_with_lighteval_extractive_match():
    """The same verdicts as lighteval 0.13's own MultilingualExtractiveMatchMetric with our configuration."""
    from lighteval.metrics.dynamic_metrics import MultilingualExtractiveMatchMetric
    from lighteval.metrics.utils.extractive_match_utils import ExprExtractionConfig, LatexExtractionConfig
    from lighteval.models.model_output import ModelResponse
    from lighteval.tasks.requests import Doc
    from lighteval.utils.language import Language

    metric = MultilingualExtractiveMatchMetric(
        language=Language.ENGLISH, gold_extraction_target=[ExprExtractionConfig(), LatexExtractionConfig()],
        pred_extraction_target=[ExprExtractionConfig(), LatexExtractionConfig(boxed_match_priority=0)],
        fallback_mode="first_match", precision=6)
    for case in CASES:
        answer = strip_reasoning(case["text"])
        doc = Doc(query="", choices=[gold_latex(case["gold"])], gold_index=0)
        theirs = bool(metric.compute(doc, ModelResponse(text=[answer]))) if answer.strip() else False
        assert theirs is verify_math(case["text"], case["gold"]), case["id"]


@pytest.mark.parametrize("text, answer", [
    ("<think>a</think>b", "b"),
    ("<think>a</think>b</think>c", "c"),
    ("<think>never closed \\boxed{1}", ""),
    ("no tags \\boxed{1}", "no tags \\boxed{1}"),
    ("opened by the template</think> 4", " 4"),
])
def test_strip_reasoning(text, answer):
    assert strip_reasoning(text) == answer


def test_gold_formats():
    assert gold_latex("\\frac{1}{2}") == "$\\frac{1}{2}$"
    assert gold_latex("$2$") == "$2$"
    assert gold_latex(["$2$"]) == "$2$"
    assert gold_latex(["$3$", "5"]) == "$3, 5$"
    for bad in ("", "  ", [], [""], 3):
        with pytest.raises(ValueError):
            gold_latex(bad)


def test_non_string_output_is_an_error():
    with pytest.raises(ValueError, match="string"):
        verify_math(None, "1")


def test_refuses_to_run_outside_the_main_thread():
    errors = []

    def call():
        try:
            verify_math("\\boxed{1}", "1")
        except RuntimeError as error:
            errors.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])


def test_verifier_info_names_the_pinned_version():
    info = verifier_info()
    assert info["name"] == "math-verify"
    assert info["version"] == "0.5.2"
    assert info["latex2sympy2_extended"] == "1.0.6"
