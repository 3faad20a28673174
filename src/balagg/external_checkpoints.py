"""External checkpoints: models trained elsewhere (or released) that a campaign evaluates without training.

A campaign's ``checkpoints:`` section names them; each ``path`` is one of

- a hub id (``org/name``) at a pinned ``revision`` (commit hash, branch or tag): fetched by the workflow's
  ``fetch`` rule into the shared hub cache, then read offline as ``org/name@revision``;
- a Hugging Face model folder (``config.json`` and weights): evaluated as step 0;
- a run folder holding several checkpoints of one run (``step-N``, TRL's ``checkpoint-N``, verl's
  ``global_step_N``): every one evaluated at its step N, a curve with its peak and last step;
- a verl checkpoint (``global_step_N`` or its ``actor/``: FSDP shards ``model_world_size_*_rank_*.pt`` and a
  ``huggingface/`` folder with the config and tokenizer): merged into a Hugging Face folder by verl's
  own merger (:func:`verl_merge_command`) before it is evaluated.

:func:`resolve` turns one entry into its steps and checks what can be checked before any job runs; every
problem is a ValueError of one line naming the checkpoint (``checkpoints.NAME: ...``).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from balagg.hub import HUB_ID
from balagg.layout import RESUMABLE_PREFIX, STEP_DIR_PREFIX

VERL_STEP_PREFIX = "global_step_"
STEP_FOLDER = re.compile(rf"^(?:{'|'.join(map(re.escape, (STEP_DIR_PREFIX, RESUMABLE_PREFIX, VERL_STEP_PREFIX)))})(\d+)$")
"""A checkpoint folder of a run, its whole name: balagg's ``step-N``, TRL's ``checkpoint-N``, verl's
``global_step_N``."""

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")
VERL_SHARD = "model_world_size_*_rank_*.pt"
VERL_ACTOR = "actor"
VERL_HF = "huggingface"


@dataclass(frozen=True)
class External:
    """One resolved entry of ``checkpoints:``: its kind and, per step, what ``generate --checkpoint`` reads
    (``org/name@revision``, a folder) or, for a verl checkpoint, the ``actor/`` folder to merge."""

    name: str
    kind: str  # hub, folder, run or verl
    source: str
    revision: str | None = None
    steps: dict[int, str] = field(default_factory=dict)
    verl: dict[int, str] = field(default_factory=dict)


def pinned(repo_id: str, revision: str) -> str:
    """``org/name@revision``: how a pinned hub checkpoint is passed to fetch and generate."""
    return f"{repo_id}@{revision}"


def split_pinned(text: str) -> tuple[str, str | None]:
    """``org/name@revision`` -> (``org/name``, ``revision``); anything else -> (text, None)."""
    repo_id, sep, revision = str(text).partition("@")
    if sep and revision and HUB_ID.fullmatch(repo_id):
        return repo_id, revision
    return str(text), None


def has_weights(folder: Path) -> bool:
    return any(next(folder.glob(pattern), None) is not None for pattern in WEIGHT_PATTERNS)


def verl_actor(folder: Path) -> Path | None:
    """The folder holding a verl checkpoint's FSDP shards (``folder`` or its ``actor/``), else None."""
    for candidate in (folder, folder / VERL_ACTOR):
        if candidate.is_dir() and next(candidate.glob(VERL_SHARD), None) is not None:
            return candidate
    return None


def verl_merge_command(actor: str | os.PathLike, target: str | os.PathLike) -> str:
    """verl's own merger of FSDP shards into a Hugging Face folder (verl.model_merger, verl >= 0.5)."""
    return (f"python -m verl.model_merger merge --backend fsdp --local_dir {shlex.quote(str(actor))} "
            f"--target_dir {shlex.quote(str(target))}")


def _model_folder(name: str, folder: Path, what: str) -> None:
    """One line unless ``folder`` is a Hugging Face model folder (config.json and weights)."""
    if not (folder / "config.json").is_file():
        raise ValueError(f"checkpoints.{name}: {what} {folder} has no config.json (not a Hugging Face model folder)")
    if not has_weights(folder):
        raise ValueError(f"checkpoints.{name}: {what} {folder} has no weights (no *.safetensors or "
                         "pytorch_model*.bin)")


def _verl_checked(name: str, actor: Path) -> Path:
    """The ``huggingface/`` folder of a verl checkpoint (config and tokenizer), or one line if it has none."""
    hf = actor / VERL_HF
    if not (hf / "config.json").is_file():
        raise ValueError(f"checkpoints.{name}: verl checkpoint {actor} has no {VERL_HF}/ folder with config.json "
                         "(verl saves it beside the FSDP shards; the merger needs it)")
    return hf


def hub_snapshot(hub_cache: str | os.PathLike, repo_id: str, revision: str) -> Path | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (a commit, or a branch or tag the cache has a
    ref of), else None. Nothing is downloaded."""
    root = Path(hub_cache) / ("models--" + repo_id.replace("/", "--"))
    ref = root / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = root / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def resolve(name: str, spec: dict, hub_cache: str | os.PathLike, offline: bool,
            merged_dir=lambda step: None) -> External:
    """One entry of ``checkpoints:`` as its steps (module docstring); ``merged_dir(step)``: where the
    workflow writes a verl checkpoint's merged Hugging Face folder. A hub revision missing from the
    cache is an error only ``offline`` (otherwise the fetch rule downloads it)."""
    path = str(spec["path"])
    folder = Path(path).expanduser()
    if not folder.exists() and HUB_ID.fullmatch(path):
        revision = spec.get("revision")
        if not revision:
            raise ValueError(f"checkpoints.{name}: hub id {path} needs a revision (a commit hash, branch or tag) "
                             "so the evaluation names what it evaluated")
        if offline and hub_snapshot(hub_cache, path, str(revision)) is None:
            raise ValueError(f"checkpoints.{name}: revision {revision} of {path} is not in the hub cache {hub_cache} "
                             "(HF_HUB_OFFLINE=1: fetch it on a host with network access, or pin a revision it has)")
        return External(name, "hub", path, str(revision), {0: pinned(path, str(revision))})
    if spec.get("revision"):
        raise ValueError(f"checkpoints.{name}: revision {spec['revision']} is for hub ids; {path} is a local path")
    if not folder.exists():
        raise ValueError(f"checkpoints.{name}: path {path} does not exist (nor is it a hub id, org/name)")
    if not folder.is_dir():
        raise ValueError(f"checkpoints.{name}: path {path} is a file, not a model folder")
    runs = {int(m.group(1)): child for child in folder.iterdir()
            if child.is_dir() and (m := STEP_FOLDER.match(child.name))}
    if runs:
        external = External(name, "run", str(folder))
        for step, child in sorted(runs.items()):
            _add_step(external, step, child, f"step {step}", merged_dir)
        return external
    external = External(name, "folder", str(folder))
    _add_step(external, 0, folder, "folder", merged_dir)
    if external.verl:
        return External(name, "verl", str(folder), None, external.steps, external.verl)
    return external


def _add_step(external: External, step: int, folder: Path, what: str, merged_dir) -> None:
    actor = verl_actor(folder)
    if actor is not None:
        _verl_checked(external.name, actor)
        external.verl[step] = str(actor)
        external.steps[step] = str(merged_dir(step))
    else:
        _model_folder(external.name, folder, what)
        external.steps[step] = str(folder)


def context_source(external: External) -> Path | None:
    """A folder whose config.json gives the checkpoint's context (the first step's), None if not local yet."""
    if external.kind == "hub":
        return None
    step = min(external.steps)
    if step in external.verl:
        return Path(external.verl[step]) / VERL_HF
    return Path(external.steps[step])


def record(external: External, settings: dict, fetch: dict | None, experiment: str, tracking_uri: str) -> dict:
    """``checkpoint.json``: what the checkpoint is (for a hub id, the commit ``fetch`` -- fetch.json --
    resolved its revision to), with the keys of a cell's manifest that ``balagg track eval`` reads, so the
    checkpoint gets an MLflow run of its own (tags ``kind``, ``source``, ``revision``, ``commit``)."""
    import hashlib
    import json

    commit = None
    if external.kind == "hub":
        for repo in (fetch or {}).get("repos", []):
            if (repo.get("repo_id"), repo.get("repo_type"), repo.get("revision")) == (
                    external.source, "model", external.revision):
                commit = repo.get("commit")
    what = {"name": external.name, "kind": external.kind, "source": external.source, "revision": external.revision,
            "commit": commit, "steps": {str(step): path for step, path in sorted(external.steps.items())},
            "verl": {str(step): path for step, path in sorted(external.verl.items())}, "settings": settings}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    tags = {"kind": "external-checkpoint", "source": external.source}
    tags |= {key: str(what[key]) for key in ("revision", "commit") if what[key]}
    return {**what, "cell": external.name, "model": external.name, "dataset": "-", "aggregator": EXTERNAL_LABEL,
            "seed": 0, "config_hash": digest, "tags": tags, "checkpoints": [{"step": s} for s in sorted(external.steps)],
            "config": {"mlflow_experiment": experiment, "mlflow_tracking_uri": tracking_uri, "train_files": []}}


EXTERNAL_LABEL = "external"
"""The aggregator tag of an external checkpoint's MLflow run (it was trained elsewhere, with its own rule)."""


CHECKPOINT_DATASET = "(checkpoint)"
"""Table 1's dataset column of an external checkpoint's row (it was not trained on the campaign's datasets)."""
EVALUATED_ONLY = "(evaluated only)"
"""Table 1's aggregator column of an external checkpoint's row: trained elsewhere, with a rule the campaign
does not know (its :func:`label` is in the ``origin`` column)."""


def label(rec: dict) -> str:
    """How Table 1 names a checkpoint's origin: ``org/name@revision (commit abcdef1)``, or its folder."""
    if rec.get("kind") == "hub":
        text = pinned(rec["source"], rec["revision"])
        commit = rec.get("commit")
        return text + (f" (commit {commit[:7]})" if commit and commit != rec["revision"] else "")
    return rec["source"]
