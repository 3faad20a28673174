"""Test-only tiny checkpoint: a random Qwen2 with a character-level tokenizer, saved with save_pretrained.

Mirrors the trainer's checkpoints (``balagg.tinyworld.model`` on branch ``tinyworld``, not merged
here yet): a ``tokenizers`` WordLevel model over printable ASCII behind a one-character Split
pre-tokenizer, wrapped in ``PreTrainedTokenizerFast`` with a chat template, and a tied-embedding
``Qwen2ForCausalLM`` with head dim 32 (vLLM's CPU attention needs 32, 64, ...). ``initializer_range``
is large so greedy decoding has clear winners (backends agree token for token).
"""

from __future__ import annotations

import string
from pathlib import Path

SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")
ALPHABET = "".join(ch for ch in string.printable if ch not in "\r\x0b\x0c")
CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages if message['role'] == 'user' %}{%- if loop.last %}"
    "{{ message['content'] }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{ '\\n' }}{%- endif %}"
)


def build_tokenizer(chat: bool = True):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS)}
    for ch in ALPHABET:
        vocab[ch] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIALS))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                        bos_token="<bos>", unk_token="<unk>", padding_side="left",
                                        clean_up_tokenization_spaces=False, model_max_length=512)
    if chat:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_checkpoint(out: Path, *, seed: int = 0, chat: bool = True, max_positions: int = 512,
                     initializer_range: float = 0.5, eos_bias: float = 0.0) -> Path:
    """Save a tiny random model + tokenizer into ``out``; ``eos_bias`` makes <eos> more likely."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(chat)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                         tie_word_embeddings=True, initializer_range=initializer_range,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    if eos_bias:
        with torch.no_grad():
            model.model.embed_tokens.weight[tokenizer.eos_token_id] *= eos_bias
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
