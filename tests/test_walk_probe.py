"""bench/walk_probe.py (docs/laboratory.md, "Probing a design outside the workflow"): its warm start and its answer kinds. The
walk task itself is balagg.tinyworld.walks (tests/test_tinyworld_walks.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import walk_probe as walk  # noqa: E402


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
    from balagg.tinyworld.walks import Walk

    assert walk.kind_of("4+6=10. 10+6=16. 16+6=2. 2+6=8. 8+6=14. \\boxed{9}", 4) == "boxed wrong, no slip"
    assert walk.kind_of(Walk(4, 4, 20).solution, 4) == "right"
    assert walk.kind_of("4+4=9. 9+4=13. 13+4=17. 17+4=1. 1+4=5.", 4) == "no box after an off-lattice slip"
    assert walk.kind_of("4+4=10. 10+4=14. 14+4=18. 18+4=2. 2+4=6. 6+4=10. \\boxed{6}", 4) == (
        "boxed wrong after an on-lattice slip")
    assert walk.first_slip("4+6=10. 10+6=17. 17+6=3.") == (10, 6, 17) and walk.first_slip(Walk(4, 4, 20).solution) is None
