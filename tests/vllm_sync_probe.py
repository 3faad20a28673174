"""Test-only probe of TRL's colocated-vLLM weight sync, for launched trainer processes
(tests/test_train_vllm_colocate.py).

:func:`install` wraps ``GRPOTrainer._generate_single_turn``. At every generation where TRL syncs the
trainer's weights into its colocated engine (TRL's own rule: the optimiser step changed since the last
sync), it scores one fixed token sequence three times: with the engine before the sync, with the engine
after it, and with the trainer's model. One JSON line per sync goes to ``<dir>/rank<N>.jsonl``:
``{"step", "rank", "before", "after", "trainer"}``, each a list of per-token log-probs of tokens 1..n-1.
The sync and the generation themselves are TRL's, unchanged; the probe only reads.

It is switched on by the environment (:func:`sitecustomize_source` writes the hook that calls it in
every trainer process): ``BALAGG_VLLM_PROBE_DIR`` (the output folder) and ``BALAGG_VLLM_PROBE_TOKENS``
(the sequence, comma-separated token ids) and, optionally, ``BALAGG_VLLM_PROBE_HOLD_AT_STEP``: after
recording the sync at that step, each process writes ``<dir>/held<N>`` and waits there until it is
killed (a test's way of killing a run at a known point).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

DIR_ENV = "BALAGG_VLLM_PROBE_DIR"
TOKENS_ENV = "BALAGG_VLLM_PROBE_TOKENS"
HOLD_ENV = "BALAGG_VLLM_PROBE_HOLD_AT_STEP"


def sitecustomize_source() -> str:
    """A ``sitecustomize.py`` that installs the probe in trainer processes only (torchrun's workers have
    ``LOCAL_RANK``; the launcher and accelerate's agent do not) when :data:`DIR_ENV` is set."""
    return (
        "import os\n"
        f"if os.environ.get({DIR_ENV!r}) and os.environ.get('LOCAL_RANK') is not None:\n"
        "    import vllm_sync_probe\n"
        "    vllm_sync_probe.install()\n"
    )


def engine_logprobs(llm, tokens: list[int]) -> list[float]:
    """The engine's log-probs of ``tokens[1:]`` given their prefixes (vLLM prompt log-probs, no sampling)."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    output = llm.generate([{"prompt_token_ids": tokens}], params, use_tqdm=False)[0]
    return [entry[token].logprob for entry, token in zip(output.prompt_logprobs[1:], tokens[1:])]


def model_logprobs(model, tokens: list[int], device) -> list[float]:
    """The trainer model's log-probs of ``tokens[1:]`` given their prefixes (every rank calls it: a sharded
    model's forward is collective)."""
    import torch

    ids = torch.tensor([tokens], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    picked = logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return picked.cpu().tolist()


def install() -> None:
    """Wrap ``GRPOTrainer._generate_single_turn`` as the module docstring says, with the settings taken out
    of the environment."""
    from trl import GRPOTrainer

    # taken out of the environment: subprocesses of the trainer (inductor's compile probes) must not
    # install the probe, and importing TRL would slow them past their timeouts
    out = Path(os.environ.pop(DIR_ENV))
    tokens = [int(t) for t in os.environ.pop(TOKENS_ENV).split(",")]
    hold = os.environ.pop(HOLD_ENV, None)
    hold_at = int(hold) if hold else None
    original = GRPOTrainer._generate_single_turn

    def probed(self, *args, **kwargs):
        if not (self.use_vllm and self.state.global_step != self._last_loaded_step):
            return original(self, *args, **kwargs)
        llm = self.vllm_generation.llm
        before = engine_logprobs(llm, tokens)
        result = original(self, *args, **kwargs)  # TRL syncs the weights, then generates
        record = {"step": self.state.global_step, "rank": self.accelerator.process_index, "before": before,
                  "after": engine_logprobs(llm, tokens),
                  "trainer": model_logprobs(self.model, tokens, self.accelerator.device)}
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"rank{record['rank']}.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        if record["step"] == hold_at:
            (out / f"held{record['rank']}").touch()
            while True:
                time.sleep(1)
        return result

    GRPOTrainer._generate_single_turn = probed
