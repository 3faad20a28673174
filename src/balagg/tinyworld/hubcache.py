"""A hub cache (``huggingface_hub``'s own layout) filled with tiny stand-ins under the paper's hub ids.

The rehearsal (configs/rehearsal.yaml) runs the paper's code path with no network: its models and
datasets are the paper's hub ids, and this module writes, under exactly those ids, what the fetch stage
would have downloaded, in the layout ``huggingface_hub.snapshot_download`` writes and reads::

    {hf_home}/hub/models--Qwen--Qwen3-1.7B/
        blobs/{sha256 of each file}
        snapshots/{commit}/{file} -> ../../blobs/{sha256}      (relative symlinks)
        refs/main                                             ({commit}, no newline)
    {hf_home}/hub/datasets--HuggingFaceH4--MATH-500/...       (same)

- models: random tiny models of the real architecture (:data:`ARCHITECTURES`: Qwen2 for
  Qwen2.5-Math-7B, Qwen3 for Qwen3-1.7B), each with the tiny world's character tokenizer extended by
  Qwen's chat tokens and a Qwen-style chat template (with the thinking tags for Qwen3);
- datasets: the tiny world's raw files (balagg.tinyworld.raw: the real raw schemas and repository
  layouts), one repository per hub id.

The commit of a snapshot is the sha1 of its files' paths and contents, so the same content gives the
same revision.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

IM_START, IM_END, THINK, END_THINK = "<|im_start|>", "<|im_end|>", "<think>", "</think>"

QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5's chat format (ChatML), without tools."""

QWEN3_CHAT_TEMPLATE = QWEN_CHAT_TEMPLATE.removesuffix("{%- endif %}") + (
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)
"""Qwen3's chat format: ChatML, and with ``enable_thinking=False`` an empty think block after the
generation prompt (as Qwen3's own template)."""

ARCHITECTURES: dict[str, dict] = {
    "Qwen/Qwen2.5-Math-7B": {"model_type": "qwen2", "chat_template": QWEN_CHAT_TEMPLATE},
    "Qwen/Qwen3-1.7B": {"model_type": "qwen3", "chat_template": QWEN3_CHAT_TEMPLATE},
}
"""The paper's models and the architecture their stand-ins have."""


def repo_folder(hf_home: str | os.PathLike, repo_id: str, repo_type: str) -> Path:
    """``{hf_home}/hub/{models|datasets}--{org}--{name}`` (huggingface_hub's repo_folder_name)."""
    from huggingface_hub.file_download import repo_folder_name

    return Path(hf_home) / "hub" / repo_folder_name(repo_id=repo_id, repo_type=repo_type)


def put_snapshot(hf_home: str | os.PathLike, repo_id: str, repo_type: str, folder: str | os.PathLike,
                 ref: str = "main") -> str:
    """Store every file under ``folder`` as the ``ref`` revision of ``repo_id``; return the commit. ``ref`` is
    a branch or tag, or a commit hash (40 hex digits), which then names the snapshot itself: a config
    pinned to a real commit of the hub finds its stand-in there. Other refs and snapshots of the repository
    stay, so a second call with another ref and other content leaves two revisions."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if not files:
        raise ValueError(f"{folder}: no files to store as {repo_id}")
    digest = hashlib.sha1()
    blobs = {}
    for path in files:
        rel = path.relative_to(folder).as_posix()
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        digest.update(f"{rel}\0{sha}\n".encode())
        blobs[rel] = (path, sha)
    commit = ref if is_commit(ref) else digest.hexdigest()
    root = repo_folder(hf_home, repo_id, repo_type)
    snapshot = root / "snapshots" / commit
    for rel, (path, sha) in blobs.items():
        blob = root / "blobs" / sha
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            shutil.copyfile(path, blob)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    if not is_commit(ref):
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    return commit


def is_commit(revision: str) -> bool:
    """Whether ``revision`` is a full commit hash (40 hex digits), not a branch or tag."""
    return len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)


def build_tokenizer(chat_template: str):
    """The tiny world's character tokenizer plus Qwen's chat tokens; ``<|im_end|>`` ends a turn."""
    from balagg.tinyworld.model import build_tokenizer as build_char_tokenizer

    tokenizer = build_char_tokenizer()
    tokenizer.add_tokens([IM_START, IM_END, THINK, END_THINK], special_tokens=True)
    tokenizer.chat_template = chat_template
    tokenizer.model_max_length = 4096
    return tokenizer


def build_model(repo_id: str, seed: int = 0, max_positions: int = 4096):
    """A random tiny model of ``repo_id``'s architecture and its tokenizer (hidden 64, 2 layers)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if repo_id not in ARCHITECTURES:
        raise ValueError(f"no tiny stand-in for {repo_id}; known: {', '.join(ARCHITECTURES)}")
    spec = ARCHITECTURES[repo_id]
    tokenizer = build_tokenizer(spec["chat_template"])
    eos = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.eos_token_id]
    config_class, model_class = {"qwen2": (Qwen2Config, Qwen2ForCausalLM),
                                 "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[spec["model_type"]]
    config = config_class(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                          max_position_embeddings=max_positions, tie_word_embeddings=True,
                          pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                          eos_token_id=eos)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id,
                                               bos_token_id=tokenizer.bos_token_id, eos_token_id=eos)
    return model, tokenizer


def fill_hub_cache(hf_home: str | os.PathLike, models: list[str] | dict[str, str], datasets: dict[str, str],
                   seed: int = 0, train_problems: int = 64, bench_problems: int = 4) -> dict[str, str]:
    """Write tiny stand-ins for ``models`` (hub ids, or {hub id: revision}, each stored as that revision;
    main by default) and ``datasets`` ({registry name: hub id}) into the hub cache of ``hf_home``; return
    {repo id: commit}."""
    from balagg.tinyworld.raw import write_raw

    commits = {}
    with tempfile.TemporaryDirectory(prefix="balagg-hubcache-") as tmp:
        revisions = models if isinstance(models, dict) else dict.fromkeys(models, "main")
        for index, (repo_id, revision) in enumerate(revisions.items()):
            model, tokenizer = build_model(repo_id, seed=seed + index)
            out = Path(tmp, "models", repo_id)
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
            commits[repo_id] = put_snapshot(hf_home, repo_id, "model", out, ref=revision)
        if datasets:
            raw = Path(tmp, "raw")
            write_raw(raw, seed, train_problems=train_problems, bench_problems=bench_problems,
                      names=tuple(dict.fromkeys(datasets)))
            for name, repo_id in datasets.items():
                commits[repo_id] = put_snapshot(hf_home, repo_id, "dataset", raw / name)
    return commits


def campaign_repos(config: dict) -> tuple[dict[str, str], dict[str, str]]:
    """A campaign config's hub models, {hub id: revision} (its grid's models at main, its external
    checkpoints at their pinned revisions; a hub id that is both keeps only the checkpoint's revision), and
    {registry name: hub id} of its datasets and benchmarks."""
    from balagg.hub import is_hub_id

    models = {spec["path"]: "main" for spec in config.get("models", {}).values() if is_hub_id(spec["path"])}
    models |= {spec["path"]: spec["revision"] for spec in (config.get("checkpoints") or {}).values()
               if is_hub_id(spec["path"]) and spec.get("revision")}
    datasets = {spec["loader"]: spec["source"] for spec in config.get("datasets", {}).values()
                if is_hub_id(spec["source"])}
    datasets |= {name: source for name, source in config["benchmarks"].items() if is_hub_id(source)}
    return models, datasets
