"""The tiny world's tokenizer and model factory (balagg.tinyworld.model)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")

from balagg.tinyworld.model import (  # noqa: E402
    ALPHABET,
    SIZES,
    SPECIAL_TOKENS,
    build_model,
    build_tokenizer,
    load_checkpoint,
    save_checkpoint,
)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_every_alphabet_character_is_one_token_and_round_trips(tokenizer):
    unk = tokenizer.unk_token_id
    for ch in ALPHABET:
        ids = tokenizer.encode(ch)
        assert len(ids) == 1 and ids[0] != unk and ids[0] >= len(SPECIAL_TOKENS), repr(ch)
        assert tokenizer.decode(ids) == ch
    ids = tokenizer.encode(ALPHABET)
    assert len(ids) == len(ALPHABET) and len(set(ids)) == len(ALPHABET)
    assert tokenizer.decode(ids) == ALPHABET


def test_spaces_and_newlines_survive(tokenizer):
    text = "def f(x):\n    return  x + 1  \n\n\\boxed{ 3 } ."
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_tokens_and_unknown_characters(tokenizer):
    assert [tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.unk_token_id] == [0, 1, 2, 3]
    assert tokenizer.encode("<eos>") == [tokenizer.eos_token_id]
    assert tokenizer.encode("é") == [tokenizer.unk_token_id]
    assert tokenizer.decode(tokenizer.encode("1<eos>"), skip_special_tokens=True) == "1"
    assert tokenizer.padding_side == "left"


def test_chat_template_prompt_is_prefix_of_training_text(tokenizer):
    messages = [{"role": "system", "content": "ignored"}, {"role": "user", "content": "Compute 1+2."}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(
        messages + [{"role": "assistant", "content": "1+2=3. \\boxed{3}"}], tokenize=False
    )
    assert prompt == "<bos>Compute 1+2.\n"
    assert full == prompt + "1+2=3. \\boxed{3}<eos>"
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id


def test_sizes_differ_and_seed_fixes_weights(tokenizer):
    small, medium = build_model("tiny-s", tokenizer, seed=1), build_model("tiny-m", tokenizer, seed=1)
    n_small = sum(p.numel() for p in small.parameters())
    n_medium = sum(p.numel() for p in medium.parameters())
    assert 2e5 < n_small < n_medium < 1e6
    assert small.config.num_hidden_layers == SIZES["tiny-s"].num_hidden_layers
    assert small.config.vocab_size == len(tokenizer)
    again = build_model("tiny-s", tokenizer, seed=1)
    other = build_model("tiny-s", tokenizer, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(small.state_dict().values(), again.state_dict().values()))
    assert not torch.equal(small.model.embed_tokens.weight, other.model.embed_tokens.weight)
    with pytest.raises(ValueError, match="unknown tiny model size"):
        build_model("huge", tokenizer)


def test_checkpoint_round_trip(tmp_path, tokenizer):
    model = build_model("tiny-s", tokenizer, seed=3)
    out = save_checkpoint(model, tokenizer, tmp_path / "ck", metadata={"size": "tiny-s"})
    save_checkpoint(model, tokenizer, out)  # overwriting an existing dir works and leaves no temp dirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    loaded, loaded_tok = load_checkpoint(out)
    assert type(loaded).__name__ == "Qwen2ForCausalLM"
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    assert loaded_tok.encode(ALPHABET) == tokenizer.encode(ALPHABET)
    assert loaded_tok.decode(loaded_tok.encode(ALPHABET)) == ALPHABET
    assert loaded_tok.chat_template == tokenizer.chat_template and loaded_tok.padding_side == "left"
    # the same logits from the same input: the saved model is the model
    ids = torch.tensor([tokenizer.encode("Compute 3+4.")])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits)
    # generation stops at <eos> and pads with <pad> by default
    assert loaded.generation_config.eos_token_id == tokenizer.eos_token_id
    assert loaded.generation_config.pad_token_id == tokenizer.pad_token_id
    with pytest.raises(ValueError, match="not a model checkpoint"):
        load_checkpoint(tmp_path)
