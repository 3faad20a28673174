"""The shared math verifier: the regression set's verdicts, reasoning tags, gold formats, guards."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import pytest

from balagg.evaluation.verify.math_verifier import gold_latex, verifier_info, verify_math
from balagg.prompts import strip_reasoning

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


needs_lighteval = pytest.mark.skipif(importlib.util.find_spec("lighteval") is None, reason="lighteval not installed")


def lighteval_verdict(text: str, gold_text: str) -> bool:
    """lighteval 0.13's own MultilingualExtractiveMatchMetric, configured as our verifier, on one pair."""
    from lighteval.metrics.dynamic_metrics import MultilingualExtractiveMatchMetric
    from lighteval.metrics.utils.extractive_match_utils import ExprExtractionConfig, LatexExtractionConfig
    from lighteval.models.model_output import ModelResponse
    from lighteval.tasks.requests import Doc
    from lighteval.utils.language import Language

    metric = MultilingualExtractiveMatchMetric(
        language=Language.ENGLISH, gold_extraction_target=[ExprExtractionConfig(), LatexExtractionConfig()],
        pred_extraction_target=[ExprExtractionConfig(), LatexExtractionConfig(boxed_match_priority=0)],
        fallback_mode="first_match", precision=6)
    answer = strip_reasoning(text)
    doc = Doc(query="", choices=[gold_text], gold_index=0)
    return bool(metric.compute(doc, ModelResponse(text=[answer]))) if answer.strip() else False


@needs_lighteval
def test_regression_set_agrees_with_lighteval_extractive_match():
    """The same verdicts as lighteval 0.13's own metric, given the gold as our verifier reads it."""
    for case in CASES:
        assert lighteval_verdict(case["text"], gold_latex(case["gold"])) is verify_math(case["text"], case["gold"]), \
            case["id"]


@needs_lighteval
def test_lighteval_reading_golds_from_a_boxed_solution_differs_only_where_documented():
    """lighteval's MATH-500 task hands its gold extractor the reference solution, whose answer stands in
    ``\\boxed{...}``. Given each gold that way, lighteval agrees with us except on the cases marked
    ``boxed_gold_differs`` (a gold ending in a lone backslash breaks the box: lighteval extracts nothing
    and scores every answer wrong). docs/evaluation.md lists them."""
    def boxed(gold) -> str:
        return "\\boxed{" + (gold if isinstance(gold, str) else ", ".join(gold)) + "}"

    differ = {case["id"] for case in CASES
              if lighteval_verdict(case["text"], boxed(case["gold"])) is not verify_math(case["text"], case["gold"])}
    assert differ == {case["id"] for case in CASES if case.get("boxed_gold_differs")}


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
    assert gold_latex("\\$36") == "$\\$36$"  # a dollar sign, not a delimiter
    assert gold_latex(["$221,$8$"]) == "$221,8$"  # an odd number of $: stray, dropped
    # an odd number of $ that would otherwise read as a pair and prose: still stray, all dropped
    assert gold_latex("$12$ cents$") == "$12 cents$"
    assert gold_latex("a+$ $b") == "$a+ b$"  # math outside the pair: stray
    assert gold_latex("$69$,$84$") == "$69$,$84$" and gold_latex("$(0, 1)$.") == "$(0, 1)$."  # delimiters
    assert gold_latex("\\textbf{(E)}\\") == "$\\textbf{(E)}$"  # a trailing lone backslash
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
