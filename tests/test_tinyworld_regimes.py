"""Laboratory length regimes (balagg.tinyworld.regimes): each regime's solutions have the lengths it claims."""

from __future__ import annotations

import random
import re
import statistics
from pathlib import Path

import pytest
import yaml

from balagg.tinyworld.regimes import (
    DOUBT_TEXT,
    FILLER_TEXT,
    REGIMES,
    RETRY_TEXT,
    STEP_TOKENS,
    Regime,
    get_regime,
    length_profile,
    regime_examples,
    right_solution,
    wrong_solution,
)
from balagg.tinyworld.tasks import sample_chain
from balagg.tinyworld.walks import WORLDS

REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"(\d+)([+-])(\d+)=(-?\d+)\.")
BOX = re.compile(r"\\boxed\{(-?\d+)\}$")


def _steps(text):
    return [(int(a), op, int(b), int(c)) for a, op, b, c in STEP.findall(text)]


def _true(a, op, b):
    return a + b if op == "+" else a - b


def test_wrong_long_loops_on_a_wrong_first_step_to_the_limit_without_a_box():
    regime, rng = get_regime("wrong-long"), random.Random(0)
    for _ in range(300):
        chain = sample_chain(rng, rng.randint(1, 4))
        text, ends = wrong_solution(chain, regime, rng)
        if chain.n_steps == 1:  # one-step chains fail by a near-miss error of the same length
            assert ends and int(BOX.search(text).group(1)) != chain.answer
            continue
        assert not ends and len(text) == regime.loop_tokens and "boxed" not in text
        steps = _steps(text)
        (a, op, b, c), = set(steps)  # one step, repeated
        assert a == chain.start and c != _true(a, op, b) and c != chain.answer
        right = right_solution(chain, regime, rng)
        assert BOX.search(right) and int(BOX.search(right).group(1)) == chain.answer
        assert len(right) + 1 < regime.loop_tokens / 2


def test_right_long_checks_every_step_and_stops_short_when_wrong():
    regime, rng = get_regime("right-long"), random.Random(1)
    for _ in range(300):
        chain = sample_chain(rng, rng.randint(1, 4))
        right = right_solution(chain, regime, rng)
        steps = _steps(right)
        assert len(steps) == 2 * chain.n_steps  # a step and its inverse check
        for (a, op, b, c), (c2, inv, b2, a2) in zip(steps[::2], steps[1::2]):
            assert c == _true(a, op, b) and (c2, b2, a2) == (c, b, a) and inv != op
        wrong, ends = wrong_solution(chain, regime, rng)
        boxed = int(BOX.search(wrong).group(1))
        assert ends and boxed != chain.answer
        if len(_steps(wrong)) < len(steps):  # a premature stop (the fallback keeps the full length)
            assert len(wrong) < len(right)
    profile = length_profile(regime)
    assert profile["wrong_mean"] / profile["right_mean"] < 0.67


def test_spread_has_a_wide_within_side_spread_and_no_gap():
    profile = length_profile(get_regime("spread"), n=6000)
    assert abs(profile["wrong_mean"] - profile["right_mean"]) < 3
    for side in ("right", "wrong"):
        assert profile[f"{side}_std"] / profile[f"{side}_mean"] > 0.3
    lo, hi = REGIMES["spread"].repeats
    assert profile["right_std"] > STEP_TOKENS * statistics.pstdev(range(lo, hi + 1)) * 0.9


def test_wrong_long_retry_retries_after_each_error_and_boxes_the_last_erroneous_value():
    regime, rng = get_regime("wrong-long-retry"), random.Random(2)
    retried_right = 0
    for _ in range(300):
        chain = sample_chain(rng, rng.randint(1, 4))
        wrong, ends = wrong_solution(chain, regime, rng)
        attempts = wrong.split(" " + RETRY_TEXT + " ")
        assert ends and len(attempts) == regime.retries + 1
        for attempt in attempts[:-1]:  # every failed attempt starts the chain again, stops at its error
            steps = _steps(attempt)
            assert steps[0][0] == chain.start
            assert all(c == _true(a, op, b) for a, op, b, c in steps[:-1])
            a, op, b, c = steps[-1]
            assert c != _true(a, op, b)
        assert _steps(attempts[-1])[0][0] == chain.start
        assert int(BOX.search(wrong).group(1)) == _steps(attempts[-1])[-1][3] != chain.answer
        right = right_solution(chain, regime, rng)
        assert int(BOX.search(right).group(1)) == chain.answer
        retried_right += RETRY_TEXT in right
        assert right.count(RETRY_TEXT) <= 1
    assert retried_right / 300 == pytest.approx(regime.right_retry_share, abs=0.07)
    profile = length_profile(regime)
    assert profile["wrong_unended_share"] == 0 and profile["wrong_mean"] / profile["right_mean"] > 1.6


@pytest.mark.parametrize("name", ["wrong-long-doubt", "wrong-long-doubt-hmm"])
def test_wrong_long_doubt_second_guesses_a_right_chain_to_the_limit_without_a_box(name):
    regime, rng = get_regime(name), random.Random(3)
    for _ in range(300):
        chain = sample_chain(rng, rng.randint(1, 4))
        right = right_solution(chain, regime, rng)
        wrong, ends = wrong_solution(chain, regime, rng)
        chain_text, tail = wrong.split(" " + DOUBT_TEXT + " ")
        assert right == chain_text + " " + BOX.search(right).group(0)  # the same right chain, then the box
        assert int(BOX.search(right).group(1)) == chain.answer
        assert all(c == _true(a, op, b) for a, op, b, c in _steps(chain_text))
        assert not ends and len(wrong) == regime.loop_tokens and "boxed" not in wrong
        if regime.doubt_tail == "restate":  # the last step restated with one wrong result, repeated
            (a, op, b, c), = set(_steps(tail))
            assert (a, op, b) == _steps(chain_text)[-1][:3] and c != chain.answer
        else:  # characters that no right answer has
            assert set(tail) <= set(FILLER_TEXT + " ") and not set(FILLER_TEXT) & set(right)
    profile = length_profile(regime)
    assert profile["wrong_unended_share"] == 1 and profile["wrong_mean"] / profile["right_mean"] > 3


def test_wrong_long_check_gets_stuck_on_a_step_whose_honest_check_fails():
    regime, rng = get_regime("wrong-long-check"), random.Random(4)
    for _ in range(300):
        chain = sample_chain(rng, rng.randint(1, 4))
        right = right_solution(chain, regime, rng)
        assert int(BOX.search(right).group(1)) == chain.answer
        pairs = list(zip(_steps(right)[::2], _steps(right)[1::2]))  # every step, then its check
        assert len(pairs) == chain.n_steps
        for (a, op, b, c), (c2, inv, b2, back) in pairs:
            assert c == _true(a, op, b) and (c2, b2, inv != op) == (c, b, True) and back == a
        wrong, ends = wrong_solution(chain, regime, rng)
        assert not ends and len(wrong) == regime.loop_tokens and "boxed" not in wrong
        steps = _steps(wrong)
        j = next(k for k in range(0, len(steps), 2) if steps[k][3] != _true(*steps[k][:3]))
        assert steps[:j] == _steps(right)[:j]  # the right checked chain up to the error
        (a, op, b, c), (c2, inv, b2, back) = steps[j], steps[j + 1]
        assert (c2, b2) == (c, b) and back == _true(c, inv, b) != a  # the honest check fails
        assert set(steps[j:]) == {steps[j], steps[j + 1]}  # and the two repeat to the limit
    profile = length_profile(regime)
    assert profile["wrong_unended_share"] == 1 and profile["wrong_mean"] / profile["right_mean"] > 2


def test_wrong_long_profile_is_at_least_three_times_longer():
    profile = length_profile(get_regime("wrong-long"))
    assert 0.6 < profile["wrong_unended_share"] < 0.85  # chains of 2+ steps loop (3 in 4 in dapo-math-17k)
    assert profile["wrong_mean"] / profile["right_mean"] > 3


def test_examples_are_deterministic_flawed_at_p_wrong_and_ends_only_where_they_should():
    for name, regime in REGIMES.items():
        a, b = regime_examples(regime, 5, 3000), regime_examples(regime, 5, 3000)
        assert a == b and a != regime_examples(regime, 6, 3000)
        share = sum(not e.correct for e in a) / len(a)
        assert share == pytest.approx(regime.p_wrong, abs=0.03), name
        assert all(e.ends for e in a if e.correct)
        assert {e.source for e in a} == ({"walk"} if regime.family in WORLDS else {"dapo-math-17k", "polaris-53k"})


def test_bad_regime_knobs_are_refused():
    with pytest.raises(ValueError, match="wrong_style"):
        Regime("x", 0.3, "ramble")
    with pytest.raises(ValueError, match="retries"):
        Regime("x", 0.3, "retry", retries=-1)
    with pytest.raises(ValueError, match="doubt_tail"):
        Regime("x", 0.3, "doubt", doubt_tail="ramble")
    with pytest.raises(ValueError, match="repeats"):
        Regime("x", 0.3, "near-miss", repeats=(3, 1))
    with pytest.raises(ValueError, match="unknown walk_world 'walks9'"):
        Regime("x", 0.3, "walk-stop", walk_world="walks9")
    with pytest.raises(ValueError, match="unknown tiny-world regime"):
        get_regime("nope")


def test_schema_lists_exactly_the_regimes():
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    models = schema["properties"]["models"]["additionalProperties"]["properties"]
    assert models["tinyworld_regime"]["enum"] == list(REGIMES)


def test_warm_start_batches_end_with_eos_except_loops():
    from balagg.tinyworld.model import build_tokenizer
    from balagg.tinyworld.warmstart import WarmStartConfig, _batches

    tokenizer = build_tokenizer()
    eos = tokenizer.eos_token_id
    batches = _batches(WarmStartConfig(steps=20, batch_size=8, regime="wrong-long"), tokenizer)
    completions = [completion for batch in batches for _, completion in batch]
    ended = [c for c in completions if c[-1] == eos]
    looping = [c for c in completions if c[-1] != eos]
    assert ended and looping
    assert all(len(c) == REGIMES["wrong-long"].loop_tokens for c in looping)
    assert all(tokenizer.decode(c).count("boxed") == 1 for c in ended)
