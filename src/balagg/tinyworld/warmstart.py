"""Supervised warm start of a tiny model and its step-0 data card.

Warm start: a plain PyTorch loop over ``warm_start_examples`` (both training tasks,
right and flawed worked solutions, and a share of code problems), cross-entropy on completion tokens
(EOS included) only, AdamW (lr 3e-3, betas 0.9/0.98, weight decay 0.01), linear warmup then cosine decay
to 0, gradient clipping at 1.0, fp32, one thread. Code examples get batches of their own so that math
batches are not padded to program length. With ``length_buckets`` = k > 1 a batch is sorted by length and
cut into k parts, each padded to its own longest example; every part's summed token loss is divided by
the whole batch's completion-token count and the gradients accumulate, so the update is the batch's
mean-token loss gradient as with one padded batch, up to float rounding.

Step-0 statistics: sample ``samples_per_problem`` completions per problem at T=1 (top_k=0, top_p=1,
TRL's sampling) for problems read from the raw training sets *through the real loaders*
(``balagg.data``), check each against the gold answer with the project's math verifier
(``balagg.evaluation.verify.math_verifier.verify_math``, the trainer's reward) where math-verify is installed, else by
integer comparison of the last ``\\boxed{}`` (the same verdicts on these integer answers whenever a
box is present; the card names the one used), and measure lengths in tokens with the EOS counted (TRL's convention; a truncated sample counts
``max_new_tokens``). The regime the paper's aggregation rules need: accuracy in [0.2, 0.8],
length CV >= 0.3 and, in at least one model/dataset pair, wrong answers longer than right ones.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from balagg import settings
from balagg.io import write_json
from balagg.layout import MODEL_CARD_FILE, TINYWORLD_MANIFEST_FILE, TINYWORLD_DEFAULT_FAMILY
from balagg.prompts import DEFAULT_ANSWER_FORMAT, render_prompt
from balagg.tinyworld.model import PROMPT_TEMPLATE
from balagg.tinyworld.regimes import get_regime, regime_examples, warm_start_family
from balagg.tinyworld.tasks import warm_start_examples

log = logging.getLogger("balagg.tinyworld")

REGIME = {"accuracy_min": 0.2, "accuracy_max": 0.8, "len_cv_min": 0.3}


@dataclass
class WarmStartConfig:
    """Settings of the supervised warm start (the defaults reach the step-0 regime of the module docstring)."""

    steps: int = settings.TINYWORLD.sft_steps
    batch_size: int = 32
    learning_rate: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01
    warmup_steps: int = 50
    grad_clip: float = 1.0
    code_share: float = 0.1
    seed: int = 0
    regime: str | None = None  # a balagg.tinyworld.regimes name: its examples replace the default mix
    length_buckets: int = settings.TINYWORLD.sft_length_buckets  # parts a batch is padded in (module doc)

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("warm start: steps and batch_size must be at least 1")
        if not 1 <= self.length_buckets <= self.batch_size:
            raise ValueError(f"warm start: length_buckets must be in 1..{self.batch_size}, got {self.length_buckets}")


def _lr_factor(step: int, config: WarmStartConfig) -> float:
    """Linear warmup to 1 over ``warmup_steps``, then cosine decay to 0 at ``steps``."""
    warmup = min(config.warmup_steps, config.steps - 1)
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, config.steps - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _batches(config: WarmStartConfig, tokenizer, examples: list | None = None) -> list[list[tuple[list[int], list[int]]]]:
    """``config.steps`` batches of (prompt ids, completion ids + EOS); code and math batches apart.
    ``examples`` (WarmStartExample): what the batches are made of, cycled if there are fewer than
    ``steps x batch_size``; by default the config's regime's, or the tiny world's tasks'."""
    n = config.steps * config.batch_size
    if examples is None and config.regime is not None:
        examples = regime_examples(get_regime(config.regime), config.seed, n + 2 * config.batch_size)
    elif examples is None:
        examples = warm_start_examples(config.seed, n + 2 * config.batch_size, code_share=config.code_share)
    eos = tokenizer.eos_token_id
    pools: dict[bool, list] = {True: [], False: []}
    for example in examples:
        prompt = tokenizer(render_prompt(PROMPT_TEMPLATE, problem=example.prompt), add_special_tokens=False)["input_ids"]
        completion = tokenizer(example.completion, add_special_tokens=False)["input_ids"] + [eos] * example.ends
        pools[example.source == "code"].append((prompt, completion))
    batches = []
    for pool in pools.values():
        batches += [pool[i:i + config.batch_size] for i in range(0, len(pool) - config.batch_size + 1, config.batch_size)]
    random.Random(f"tinyworld-batches-{config.seed}").shuffle(batches)
    return [batches[i % len(batches)] for i in range(config.steps)]


def _length_parts(batch, buckets: int) -> list[list[tuple[list[int], list[int]]]]:
    """``batch`` as one part (``buckets`` = 1, in its order), or sorted by length and cut into ``buckets``
    parts of (nearly) equal size, each to be padded on its own."""
    if buckets == 1:
        return [batch]
    ordered = sorted(batch, key=lambda example: len(example[0]) + len(example[1]))
    cuts = [len(ordered) * k // buckets for k in range(buckets + 1)]
    return [ordered[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def _batch_loss_backward(model, batch, pad_id: int, buckets: int) -> tuple[float, int]:
    """Backpropagate the batch's mean cross-entropy over its completion tokens; return (loss, tokens).

    One part: the model's own mean loss. Several: each part's summed loss over the batch's completion
    tokens (``num_items_in_batch``, transformers' gradient-accumulation reduction), which adds up to it."""
    parts = _length_parts(batch, buckets)
    scale = {} if len(parts) == 1 else {"num_items_in_batch": sum(len(completion) for _, completion in batch)}
    loss_value, tokens = 0.0, 0
    for part in parts:
        ids, mask, labels = _collate(part, pad_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, **scale).loss
        loss.backward()
        loss_value += loss.item()
        tokens += int(mask.sum())
    return loss_value, tokens


def _collate(batch, pad_id: int):
    """Right-padded input ids, attention mask and labels (-100 on prompt and padding)."""
    import torch

    width = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, (prompt, completion) in enumerate(batch):
        seq = prompt + completion
        ids[row, :len(seq)] = torch.tensor(seq)
        mask[row, :len(seq)] = 1
        labels[row, len(prompt):len(seq)] = torch.tensor(completion)
    return ids, mask, labels


def warm_start(model, tokenizer, config: WarmStartConfig, examples: list | None = None) -> dict:
    """Train ``model`` in place; return a summary (seconds, losses at start and end, tokens).
    ``examples``: the supervised examples, if not the config's (:func:`_batches`)."""
    import torch

    torch.manual_seed(config.seed)
    batches = _batches(config, tokenizer, examples)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.learning_rate, betas=config.betas,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, config))
    model.train()
    start, cpu_start, losses, tokens = time.perf_counter(), time.process_time(), [], 0
    for step, batch in enumerate(batches):
        optimizer.zero_grad(set_to_none=True)
        loss, batch_tokens = _batch_loss_backward(model, batch, tokenizer.pad_token_id, config.length_buckets)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss)
        tokens += batch_tokens
        if (step + 1) % 100 == 0 or step + 1 == config.steps:
            log.info("warm start step %d/%d loss %.4f", step + 1, config.steps, sum(losses[-100:]) / len(losses[-100:]))
    model.eval()
    window = max(1, min(50, len(losses) // 4))
    return {
        **asdict(config),
        "seconds": round(time.perf_counter() - start, 2),
        "cpu_seconds": round(time.process_time() - cpu_start, 2),
        "loss_first": sum(losses[:window]) / window,
        "loss_last": sum(losses[-window:]) / window,
        "tokens": tokens,
    }


def boxed_integer(text: str) -> int | None:
    """The last ``\\boxed{}`` of ``text`` as an integer, or None (no box, or not an integer)."""
    from balagg.data.fields import last_boxed

    content = last_boxed(text)
    if content is None:
        return None
    try:
        return int(content.strip())
    except ValueError:
        return None


def answer_checker(answer_format: str = DEFAULT_ANSWER_FORMAT) -> tuple[str, Callable[[str, str], bool]]:
    """``(description, check(text, gold) -> bool)``: the project's math verifier on what the reward and
    the scoring give it (:func:`balagg.prompts.answer_for_verifier` with ``answer_format``) when its
    pinned math-verify is installed, otherwise integer comparison of the last ``\\boxed{}``."""
    try:
        from balagg.evaluation.verify.math_verifier import verifier_info, verify_math
        from balagg.prompts import answer_for_verifier

        info = verifier_info()

        def verified(text: str, gold: str) -> bool:
            answer = answer_for_verifier(text, answer_format)
            return answer is not None and verify_math(answer, gold)

        return (f"{info['name']} {info['version']} (balagg.evaluation.verify.math_verifier.verify_math, "
                f"answer format {answer_format})", verified)
    except (ImportError, RuntimeError) as error:
        log.info("math verifier unavailable (%s); using integer comparison of the last \\boxed{}", error)

    def integer_boxed(text: str, gold: str) -> bool:
        predicted = boxed_integer(text)
        return predicted is not None and predicted == int(gold)

    return "integer comparison of the last \\boxed{} (balagg.tinyworld.warmstart.boxed_integer)", integer_boxed


def sample_completions(model, tokenizer, problems: list[str], samples_per_problem: int, *,
                       max_new_tokens: int = 96, batch_size: int = 128, seed: int = 0) -> list[dict]:
    """``samples_per_problem`` completions per problem at T=1, top_k=0, top_p=1.

    Returns one dict per sample: problem index, text (up to the first EOS), length in tokens (EOS
    included; ``max_new_tokens`` when truncated), truncated flag.
    """
    import torch

    torch.manual_seed(seed)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    jobs = [(i, render_prompt(PROMPT_TEMPLATE, problem=p)) for i, p in enumerate(problems) for _ in range(samples_per_problem)]
    tokenizer.padding_side = "left"
    samples = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start:start + batch_size]
        enc = tokenizer([text for _, text in chunk], add_special_tokens=False, padding=True, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
        for (index, _), row in zip(chunk, out[:, enc["input_ids"].shape[1]:].tolist()):
            length = row.index(eos) + 1 if eos in row else len(row)
            truncated = eos not in row
            text = tokenizer.decode(row[:length], skip_special_tokens=True)
            samples.append({"problem": index, "text": text, "length": length if not truncated else max_new_tokens,
                            "truncated": truncated})
    return samples


def step0_statistics(samples: list[dict], answers: list[str], samples_per_problem: int,
                     check: Callable[[str, str], bool] | None = None) -> dict:
    """Accuracy and length statistics of sampled completions (module doc); within-group length
    diagnostics come from ``balagg.aggregation.length_diagnostics`` with GRPO advantages. ``check``
    defaults to :func:`answer_checker`'s."""
    from balagg.aggregation import group_advantages, length_diagnostics

    check = check or answer_checker()[1]
    rewards, lengths, groups = [], [], []
    for sample in samples:
        rewards.append(1.0 if check(sample["text"], answers[sample["problem"]]) else 0.0)
        lengths.append(float(sample["length"]))
        groups.append(sample["problem"])
    right = [n for n, r in zip(lengths, rewards) if r > 0]
    wrong = [n for n, r in zip(lengths, rewards) if r == 0]
    advantages = group_advantages(rewards, groups)
    diag = length_diagnostics(lengths, advantages, groups)
    nan = float("nan")
    stats = {
        "n_problems": len(answers),
        "n_samples": len(samples),
        "samples_per_problem": samples_per_problem,
        "accuracy": sum(rewards) / len(rewards),
        "len_mean": diag["len_mean"],
        "len_cv": diag["len_cv"],
        "len_right_mean": sum(right) / len(right) if right else nan,
        "len_wrong_mean": sum(wrong) / len(wrong) if wrong else nan,
        "len_cv_within_group": diag["len_cv_within_group"],
        "len_pos_mean": diag["len_pos_mean"],
        "len_neg_mean": diag["len_neg_mean"],
        "mixed_group_frac": diag["mixed_group_frac"],
        "side_mass_ratio_token_agg": side_mass_ratio(diag, "token-agg"),
        "truncation_rate": sum(s["truncated"] for s in samples) / len(samples),
    }
    stats["wrong_longer"] = bool(wrong and right and stats["len_wrong_mean"] > stats["len_right_mean"])
    stats["in_regime"] = bool(
        REGIME["accuracy_min"] <= stats["accuracy"] <= REGIME["accuracy_max"]
        and stats["len_cv"] >= REGIME["len_cv_min"]
    )
    return stats


def side_mass_ratio(diagnostics: dict, rule: str) -> float:
    """Negative over positive side mass (sum of w_i |A_i| |o_i|) of ``rule`` in a
    :func:`balagg.aggregation.length_diagnostics` dict; NaN when the positive side is empty."""
    pos = diagnostics.get(f"side_weight/{rule}/pos", math.nan)
    neg = diagnostics.get(f"side_weight/{rule}/neg", math.nan)
    return neg / pos if pos > 0 else math.nan


def read_training_problems(raw_dir, name: str, limit: int) -> tuple[list[str], list[str]]:
    """The first ``limit`` (problem, answer) pairs of raw training set ``name`` via the real loader."""
    from pathlib import Path

    from balagg.data.prepare import open_rows
    from balagg.data.sources import get_source

    source = get_source(name, "train")
    problems, answers = [], []
    for row in open_rows(Path(raw_dir) / name, source):
        record = source.normalise(row)
        problems.append(record["problem"])
        answers.append(str(record["answer"]))
        if len(problems) == limit:
            break
    if not problems:
        raise ValueError(f"{raw_dir}/{name}: no training problems")
    return problems, answers


def summary_line(model_name: str, card: dict) -> str:
    """The card in one log line."""
    parts = [
        f"{name} acc {s['accuracy']:.3f} len_cv {s['len_cv']:.3f} len right/wrong "
        f"{s['len_right_mean']:.1f}/{s['len_wrong_mean']:.1f} token-agg side mass neg/pos "
        f"{s.get('side_mass_ratio_token_agg', math.nan):.2f}"
        for name, s in card["datasets"].items()
    ]
    return f"tinyworld {model_name} step 0: " + " | ".join(parts) + f" | regime met: {card['regime']['met']}"


def build_warm_model(size: str, raw_dir, out, *, seed: int = 0, config: WarmStartConfig | None = None,
                     card_problems: int = 64, samples_per_problem: int = 8, max_new_tokens: int = 96,
                     train_sets: tuple[str, ...] | None = None, answer_format: str = DEFAULT_ANSWER_FORMAT) -> dict:
    """Build tiny model ``size``, warm-start it, save it to ``out`` and write ``out/card.json`` last.

    The card holds the step-0 statistics per training set found in ``raw_dir`` (its manifest), judged as
    the reward and the scoring judge them (``answer_format``, the model's), the warm-start summary, the
    model shape and the seeds; it is returned too.
    """
    import hashlib
    import json
    from pathlib import Path

    import torch

    from balagg.tinyworld.model import build_model, build_tokenizer, save_checkpoint, size_summary

    torch.set_num_threads(1)
    raw_dir, out = Path(raw_dir), Path(out)
    manifest_path = raw_dir / TINYWORLD_MANIFEST_FILE
    if not manifest_path.is_file():
        raise ValueError(f"{raw_dir} has no manifest.json (run `python -m balagg tinyworld data` first)")
    manifest = json.loads(manifest_path.read_text())
    config = config or WarmStartConfig(seed=seed)
    family, writes = manifest.get("family", TINYWORLD_DEFAULT_FAMILY), warm_start_family(config.regime)
    if family != writes:
        raise ValueError(f"{manifest_path}: the tiny world's family is {family!r}, but the warm start "
                         f"({config.regime or 'the default mix'}) writes {writes!r} problems; "
                         f"give it the raw folder of the {writes} family (balagg.layout.tinyworld_raw_dir)")
    if train_sets is None:
        train_sets = tuple(n for n, d in manifest["datasets"].items() if d["role"] == "train")
    tokenizer = build_tokenizer()
    model = build_model(size, tokenizer, seed=seed)
    log.info("tinyworld %s: %d parameters; warm start for %d steps", size,
             sum(p.numel() for p in model.parameters()), config.steps)
    sft = warm_start(model, tokenizer, config)
    log.info("tinyworld %s: warm start took %.1f s, loss %.3f -> %.3f", size, sft["seconds"], sft["loss_first"],
             sft["loss_last"])
    verifier, check = answer_checker(answer_format)
    datasets, sampling_start = {}, time.perf_counter()
    for k, name in enumerate(train_sets):
        problems, answers = read_training_problems(raw_dir, name, card_problems)
        samples = sample_completions(model, tokenizer, problems, samples_per_problem,
                                     max_new_tokens=max_new_tokens, seed=seed + k)
        datasets[name] = step0_statistics(samples, answers, samples_per_problem, check=check)
    sampling_seconds = round(time.perf_counter() - sampling_start, 2)
    card = {
        "model": size,
        "shape": size_summary(size),
        "parameters": sum(p.numel() for p in model.parameters()),
        "seed": seed,
        "length_regime": config.regime,
        "data_seed": manifest.get("seed"),
        "raw_manifest_sha256": hashlib.sha256(manifest_path.read_bytes()).hexdigest(),
        "prompt_template": PROMPT_TEMPLATE,
        "warm_start": sft,
        "sampling": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": max_new_tokens,
                     "samples_per_problem": samples_per_problem, "problems_per_dataset": card_problems,
                     "seconds": sampling_seconds},
        "verifier": verifier,
        "length_unit": "tokens, EOS included; truncated samples count max_new_tokens",
        "datasets": datasets,
    }
    card["regime"] = {
        **REGIME,
        "all_in_regime": all(s["in_regime"] for s in datasets.values()),
        "wrong_longer_in": [n for n, s in datasets.items() if s["wrong_longer"]],
    }
    card["regime"]["met"] = card["regime"]["all_in_regime"] and bool(card["regime"]["wrong_longer_in"])
    save_checkpoint(model, tokenizer, out, metadata={k: card[k] for k in ("model", "shape", "seed", "prompt_template")})
    write_json(out / MODEL_CARD_FILE, card)  # undefined statistics (no wrong answer, no mixed group) -> null
    log.info(summary_line(size, card))
    return card


def bad_row_counts(report_paths) -> dict:
    """{prepared file: {"skipped", "rows_read", "examples"}} from prepare-data reports (``--report``)."""
    import json
    from pathlib import Path

    counts = {}
    for path in report_paths:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read prepare-data report {path}: {error}") from None
        counts[report["out"]] = {"skipped": report["skipped"], "rows_read": report["rows_read"],
                                 "examples": report["bad_rows"][:5]}
    return counts


def merge_cards(card_paths, out, data_reports=()) -> dict:
    """One data card for the campaign from the per-model ``card.json`` files (and the prepare-data
    reports: ``"bad_rows"`` = {output file: {"skipped", "rows_read", "examples": the first 5 bad rows}}).

    ``{"models": {model: card}, "table": [{"model", "dataset", "accuracy", "len_cv", "len_right_mean",
    "len_wrong_mean", "in_regime", "wrong_longer"}, ...], "regime_met": bool}``; ``regime_met`` is the
    issue's condition over the grid: every pair in range and wrong answers longer in at least one pair.
    """
    import json
    from pathlib import Path

    models = {}
    for path in card_paths:
        path = Path(path)
        try:
            card = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read model card {path}: {error}") from None
        if "datasets" not in card or "model" not in card:
            raise ValueError(f"{path} is not a tiny-world model card (no 'model'/'datasets')")
        models[card["model"]] = card
    if not models:
        raise ValueError("no model cards given")
    keys = ("accuracy", "len_cv", "len_right_mean", "len_wrong_mean", "in_regime", "wrong_longer")
    table = [{"model": m, "dataset": d, **{k: s[k] for k in keys}}
             for m, card in models.items() for d, s in card["datasets"].items()]
    merged = {
        "models": models,
        "table": table,
        "regime_met": all(r["in_regime"] for r in table) and any(r["wrong_longer"] for r in table),
        "bad_rows": bad_row_counts(data_reports),
    }
    write_json(out, merged)
    return merged
