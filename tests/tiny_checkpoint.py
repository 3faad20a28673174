"""Test-only tiny checkpoint: a random Qwen2 with the tiny world's character-level tokenizer
(:func:`balagg.tinyworld.model.build_tokenizer`), saved with save_pretrained.

Differs from the tiny world's models where the generation tests need it: a chat template that adds
``<bos>`` and a newline (so chat and plain prompts differ), head dim 32 (vLLM's CPU attention needs 32,
64, ...) and a large ``initializer_range`` so greedy decoding has clear winners (backends agree token
for token).
"""

from __future__ import annotations

from pathlib import Path

from balagg.tinyworld.model import build_tokenizer as build_tinyworld_tokenizer

CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages if message['role'] == 'user' %}{%- if loop.last %}"
    "{{ message['content'] }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{ '\\n' }}{%- endif %}"
)


def build_tokenizer(chat: bool = True):
    tokenizer = build_tinyworld_tokenizer()
    tokenizer.model_max_length = 512
    tokenizer.chat_template = CHAT_TEMPLATE if chat else None
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
