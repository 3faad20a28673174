"""Character-level tokenizer and random-init tiny Qwen2 causal LMs.

Tokenizer: one token per character of ``ALPHABET`` (printable ASCII plus newline and tab, which covers
the math chains, ``\\boxed{}``, the DAPO prompt wrapper and the small Python programs of the code
benchmark), plus four special tokens ``<pad> <eos> <bos> <unk>`` (ids 0-3). Any other character encodes
to ``<unk>``. It is a ``tokenizers`` WordLevel model behind a ``Split(any character, isolated)``
pre-tokenizer with the ``Fuse`` decoder, so for text over the alphabet ``decode(encode(s)) == s``.

Prompt format: the prompt is the bare problem text and the answer follows it directly
(``Compute 7-1-2+5.`` then ``7-1=6. 6-2=4. 4+5=9. \\boxed{9}<eos>``). ``PROMPT_TEMPLATE`` is that
format for a trainer's ``prompt_template``; the chat template renders the same tokens, so a trainer gets
identical prompts with or without ``apply_chat_template``:

    {last user message}{assistant message}<eos>

(system messages and the generation prompt add nothing). Load a saved tokenizer with
:func:`balagg.prompts.load_tokenizer` (as training and evaluation do), never with ``AutoTokenizer``:
for ``model_type=qwen2`` that returns Qwen2's byte-level tokenizer whatever ``tokenizer_class`` says
(transformers 5.17), which drops spaces and changes the ids.

Models: ``Qwen2ForCausalLM`` with tied embeddings, 4 query / 2 key-value heads, SwiGLU width 2H, RoPE
(so ``max_position_embeddings`` costs no parameters). ``SIZES`` names the shapes.
"""

from __future__ import annotations

import os
import string
from dataclasses import asdict, dataclass
from pathlib import Path

from balagg.prompts import load_tokenizer

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<eos>", "<bos>", "<unk>")
PAD, EOS, BOS, UNK = SPECIAL_TOKENS

ALPHABET: str = "".join(ch for ch in string.printable if ch not in "\r\x0b\x0c")
"""Every character with its own token: the 95 printable ASCII characters, newline and tab."""

PROMPT_TEMPLATE: str = "{problem}"
"""The tiny world's prompt: the problem text itself (no instruction; the models are too small)."""

CHAT_TEMPLATE: str = (
    "{%- for message in messages if message['role'] == 'user' %}{%- if loop.last %}"
    "{{ message['content'] }}{%- endif %}{%- endfor %}"
    "{%- for message in messages if message['role'] == 'assistant' %}{%- if loop.last %}"
    "{{ message['content'] + eos_token }}{%- endif %}{%- endfor %}"
)


@dataclass(frozen=True)
class ModelSize:
    """Shape of one named tiny model."""

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024

    @property
    def intermediate_size(self) -> int:
        return 2 * self.hidden_size


SIZES: dict[str, ModelSize] = {
    "tiny-xs": ModelSize(num_hidden_layers=2, hidden_size=96),
    "tiny-s": ModelSize(num_hidden_layers=2, hidden_size=128),
    "tiny-m": ModelSize(num_hidden_layers=4, hidden_size=128),
    "tiny-l": ModelSize(num_hidden_layers=4, hidden_size=256),
}
"""Named shapes. tiny-s (~0.3M parameters) and tiny-xs (~0.17M) are the default grid's two models
(configs/default.yaml); tiny-m (~0.6M) costs about twice tiny-s per step, tiny-l (~2.4M) 2-4x more."""


def context_config(size: str) -> dict:
    """The context keys of the config.json :func:`build_model` writes for ``size``, known before it is built
    (balagg.context checks a campaign's lengths against them)."""
    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {', '.join(SIZES)}")
    return {"max_position_embeddings": SIZES[size].max_position_embeddings}


def build_tokenizer():
    """The character-level tokenizer as a ``PreTrainedTokenizerFast`` (left padding, chat template)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for ch in ALPHABET:
        vocab[ch] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=SIZES["tiny-s"].max_position_embeddings,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(size: str, tokenizer=None, seed: int = 0):
    """A random-init ``Qwen2ForCausalLM`` of the named ``size``; weights depend only on ``seed``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {', '.join(SIZES)}")
    shape = SIZES[size]
    tokenizer = tokenizer if tokenizer is not None else build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    )
    return model


def save_checkpoint(model, tokenizer, out_dir: str | os.PathLike, metadata: dict | None = None) -> Path:
    """Write model + tokenizer with ``save_pretrained`` into ``out_dir`` atomically (temp dir, rename).

    ``metadata`` (JSON-serialisable) goes to ``tinyworld.json`` next to the weights. An existing
    ``out_dir`` is replaced.
    """
    import json
    import shutil
    import tempfile

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if metadata is not None:
            (tmp / "tinyworld.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_checkpoint(path: str | os.PathLike):
    """Load ``(model, tokenizer)`` from a checkpoint dir (``from_pretrained`` + :func:`balagg.prompts.load_tokenizer`)."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is not a model checkpoint (no config.json)")
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, tokenizer


def size_summary(size: str) -> dict:
    """The named shape as a plain dict (for data cards and manifests)."""
    shape = SIZES[size]
    return asdict(shape) | {"intermediate_size": shape.intermediate_size}
