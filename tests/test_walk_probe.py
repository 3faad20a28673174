"""bench/walk_probe.py's walk world (docs/laboratory.md, the seventh design): what its data claims."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import walk_probe as walk  # noqa: E402

STEP = re.compile(r"(\d+)\+(\d+)=(\d+)\.")


def test_right_walks_stay_even_and_end_at_zero_within_five_steps_with_the_count_boxed():
    problems = walk.problems()
    assert len(problems) == len(set(problems)) == 37
    for start, step, count in problems:
        text = walk.right_solution(start, step)
        steps = [tuple(map(int, s)) for s in STEP.findall(text)]
        assert len(steps) == count <= walk.MAX_STEPS and steps[0][0] == start and steps[-1][2] == 0
        assert all((a + b) % walk.MOD == c and c % 2 == 0 and b == step for a, b, c in steps)
        assert all(c == a2 for (_, _, c), (a2, _, _) in zip(steps, steps[1:]))
        assert text.endswith(f"\\boxed{{{count}}}")


def test_a_wrong_walk_slips_to_an_odd_value_once_and_then_follows_the_rule_to_the_limit():
    rng = random.Random(0)
    for start, step, _ in walk.problems() * 5:
        text = walk.wrong_solution(start, step, rng)
        assert len(text) == walk.LOOP_CHARS and "boxed" not in text
        steps = [tuple(map(int, s)) for s in STEP.findall(text)]
        slips = [k for k, (a, b, c) in enumerate(steps) if (a + b) % walk.MOD != c]
        assert len(slips) == 1 and steps[slips[0]][2] % 2 == 1  # one near miss, odd
        assert all(c != 0 for _, _, c in steps[slips[0]:])  # the odd residues never reach 0
        assert all(c == a2 for (_, _, c), (a2, _, _) in zip(steps, steps[1:]))


def test_the_warm_start_is_made_of_the_examples_it_is_given():
    from balagg.tinyworld.model import build_tokenizer
    from balagg.tinyworld.warmstart import WarmStartConfig, _batches

    tokenizer = build_tokenizer()
    examples = walk.warm_start_examples(0, 40, p_wrong=0.4)
    batches = _batches(WarmStartConfig(steps=6, batch_size=8), tokenizer, examples)
    assert len(batches) == 6 and all(len(batch) == 8 for batch in batches)
    texts = {e.completion for e in examples}
    for batch in batches:
        for _, completion in batch:
            text = tokenizer.decode(completion).removesuffix(tokenizer.eos_token)
            assert text in texts  # a walk of the probe's, never a chain of the tiny world's tasks


def test_sampled_answers_are_told_apart_by_what_went_wrong():
    assert walk.kind_of("4+6=10. 10+6=16. 16+6=2. 2+6=8. 8+6=14. \\boxed{9}", 4, 6, 4) == "boxed wrong, no slip"
    assert walk.kind_of(walk.right_solution(4, 4), 4, 4, 4) == "right"
    assert walk.kind_of("4+4=9. 9+4=13. 13+4=17. 17+4=1. 1+4=5.", 4, 4, 4) == "loop after an odd slip"
    assert walk.kind_of("4+4=10. 10+4=14. 14+4=18. 18+4=2. 2+4=6. 6+4=10. \\boxed{6}", 4, 4, 4) == (
        "boxed wrong after an even slip")
