"""Laboratory length regimes (balagg.tinyworld.regimes): each regime's solutions have the lengths it claims."""

from __future__ import annotations

import random
import re
import statistics
from pathlib import Path

import pytest
import yaml

from balagg.tinyworld.regimes import (
    REGIMES,
    STEP_TOKENS,
    Regime,
    get_regime,
    length_profile,
    regime_examples,
    right_solution,
    wrong_solution,
)
from balagg.tinyworld.tasks import sample_chain
from balagg.tinyworld.walks import LOOP_CHARS, WORLDS

REPO = Path(__file__).resolve().parents[1]
STEP = re.compile(r"(\d+)([+-])(\d+)=(-?\d+)\.")
BOX = re.compile(r"\\boxed\{(-?\d+)\}$")


def _steps(text):
    return [(int(a), op, int(b), int(c)) for a, op, b, c in STEP.findall(text)]


def _true(a, op, b):
    return a + b if op == "+" else a - b


def _collapsed(steps):
    """``steps`` with each run of one repeated step written once (no chain repeats a step in a row: b > 0)."""
    return [s for k, s in enumerate(steps) if k == 0 or s != steps[k - 1]]


def test_spread_repeats_one_step_on_both_sides_and_a_wrong_answer_carries_one_near_miss_to_its_box():
    regime, rng = get_regime("spread"), random.Random(0)
    lo, hi = regime.repeats
    for _ in range(300):
        chain = sample_chain(rng, rng.randint(1, 4))
        right = right_solution(chain, regime, rng)
        steps = _steps(right)
        assert int(BOX.search(right).group(1)) == chain.answer
        assert all(c == _true(a, op, b) for a, op, b, c in steps)
        assert len(_collapsed(steps)) == chain.n_steps and lo <= len(steps) - chain.n_steps <= hi
        wrong, ends = wrong_solution(chain, regime, rng)
        steps = _steps(wrong)
        errors = {s for s in steps if s[3] != _true(*s[:3])}
        assert ends and len(errors) == 1 and len(_collapsed(steps)) == chain.n_steps
        assert lo <= len(steps) - chain.n_steps <= hi
        assert int(BOX.search(wrong).group(1)) == steps[-1][3] != chain.answer


def test_spread_has_a_wide_within_side_spread_and_no_gap():
    profile = length_profile(get_regime("spread"), n=6000)
    assert abs(profile["wrong_mean"] - profile["right_mean"]) < 3
    for side in ("right", "wrong"):
        assert profile[f"{side}_std"] / profile[f"{side}_mean"] > 0.3
    lo, hi = REGIMES["spread"].repeats
    assert profile["right_std"] > STEP_TOKENS * statistics.pstdev(range(lo, hi + 1)) * 0.9


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
    with pytest.raises(ValueError, match="p_wrong"):
        Regime("x", 1.0, "near-miss")
    with pytest.raises(ValueError, match="repeats"):
        Regime("x", 0.3, "near-miss", repeats=(3, 1))
    with pytest.raises(ValueError, match="unknown walk_world 'walks9'"):
        Regime("x", 0.3, "walk-stop", walk_world="walks9")
    with pytest.raises(ValueError, match="unknown tiny-world regime"):
        get_regime("nope")


def test_the_regimes_are_the_schema_enum_and_each_one_a_shipped_config_uses():
    from balagg.campaign import campaign_schema

    models = campaign_schema()["properties"]["models"]["additionalProperties"]["properties"]
    assert models["tinyworld_regime"]["enum"] == list(REGIMES)
    used = {spec.get("tinyworld_regime") for path in (REPO / "configs").glob("*.yaml")
            for spec in (yaml.safe_load(path.read_text()).get("models") or {}).values()}
    assert set(REGIMES) == used - {None}


def test_warm_start_batches_end_with_eos_except_loops():
    from balagg.tinyworld.model import build_tokenizer
    from balagg.tinyworld.warmstart import WarmStartConfig, _batches

    tokenizer = build_tokenizer()
    eos = tokenizer.eos_token_id
    batches = _batches(WarmStartConfig(steps=20, batch_size=8, regime="wrong-long-walk"), tokenizer)
    completions = [completion for batch in batches for _, completion in batch]
    ended = [c for c in completions if c[-1] == eos]
    looping = [c for c in completions if c[-1] != eos]
    assert ended and looping
    assert all(len(c) == LOOP_CHARS for c in looping)
    assert all(tokenizer.decode(c).count("boxed") == 1 for c in ended)
