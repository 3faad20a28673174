"""Models and datasets from the Hugging Face hub through its own cache (``huggingface_hub``'s layout).

Compute nodes are often offline, so the workflow's ``fetch`` stage snapshots every model and dataset of
a campaign once, on the submit host, into a shared cache (``HF_HOME``; the snapshots live under
``$HF_HOME/hub/{models,datasets}--{org}--{name}/snapshots/{commit}/``), records the commits in
``results/{campaign}/fetch.json``, and every compute job then runs with ``HF_HUB_OFFLINE=1`` and
resolves the same ids from that cache:

- :func:`fetch` downloads (or, offline, finds) the snapshots: ``huggingface_hub.snapshot_download``;
- :func:`resolve_snapshot` turns a hub id into its cached snapshot folder without any network
  (``local_files_only=True``), for code that wants a local folder (generation, data preparation).

A *hub id* is ``org/name`` (one slash, no existing local path of that name).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from balagg.layout import NAME_PATTERN

HUB_ID = re.compile(rf"^{NAME_PATTERN}/{NAME_PATTERN}$")
REPO_TYPES = ("model", "dataset")


def is_hub_id(source: str | os.PathLike) -> bool:
    """Whether ``source`` names a hub repository rather than a local file or folder."""
    text = str(source)
    return bool(HUB_ID.fullmatch(text)) and not Path(text).exists()


def hub_cache(hf_home: str | os.PathLike | None = None) -> Path:
    """The hub cache folder: ``{hf_home}/hub`` if given, else huggingface_hub's own, read now
    (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``)."""
    if hf_home is not None:
        return Path(hf_home) / "hub"
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def resolve_snapshot(repo_id: str, repo_type: str = "model", hf_home: str | os.PathLike | None = None,
                     revision: str | None = None) -> Path:
    """The cached snapshot folder of ``repo_id`` (no network); a ValueError that says to fetch if absent."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, got {repo_type!r}")
    cache = hub_cache(hf_home)
    try:
        return Path(snapshot_download(repo_id, repo_type=repo_type, revision=revision, cache_dir=cache,
                                      local_files_only=True))
    except LocalEntryNotFoundError:
        raise ValueError(f"{repo_type} {repo_id} is not in the hub cache {cache}: run `python -m balagg fetch` "
                         "(the workflow's fetch rule) on a host with network access first") from None


def allow_patterns(repo_type: str, subset: str | None = None, data_file: str | None = None) -> list[str] | None:
    """What to download of a repository: a dataset's one data file or one subset folder (plus its card,
    which holds the configs), else everything."""
    if repo_type == "dataset" and data_file:
        return [data_file, "README.md"]
    if repo_type == "dataset" and subset:
        return [f"{subset}/*", f"{subset}/**", "README.md"]
    return None


def fetch(repos: list[dict], hf_home: str | os.PathLike | None = None, offline: bool | None = None) -> list[dict]:
    """Snapshot every repository of ``repos`` into the hub cache; return one record per repository.

    Each item of ``repos``: ``{"repo_id", "repo_type", "revision" (optional), "allow_patterns" (optional)}``.
    Each record adds ``commit`` (the snapshot's commit hash) and ``path`` (the snapshot folder).
    ``offline`` (default: ``HF_HUB_OFFLINE``) only looks in the cache (``local_files_only``): a missing
    snapshot is then an error naming the repository.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if offline is None:
        offline = bool(constants.HF_HUB_OFFLINE)
    cache = hub_cache(hf_home)
    records = []
    for repo in repos:
        repo_id, repo_type = repo["repo_id"], repo.get("repo_type", "model")
        if repo_type not in REPO_TYPES:
            raise ValueError(f"fetch: {repo_id}: repo_type must be one of {REPO_TYPES}, got {repo_type!r}")
        if not HUB_ID.fullmatch(repo_id):
            raise ValueError(f"fetch: {repo_id!r} is not a hub id (org/name)")
        try:
            path = Path(snapshot_download(repo_id, repo_type=repo_type, revision=repo.get("revision"),
                                          cache_dir=cache, allow_patterns=repo.get("allow_patterns"),
                                          local_files_only=offline))
        except LocalEntryNotFoundError:
            at = f" at revision {repo['revision']}" if repo.get("revision") else ""
            raise ValueError(f"fetch: {repo_type} {repo_id}{at} is not in the hub cache {cache} and the hub is "
                             f"{'off (HF_HUB_OFFLINE=1)' if offline else 'unreachable'}") from None
        records.append({"repo_id": repo_id, "repo_type": repo_type, "revision": repo.get("revision") or "main",
                        "commit": path.name, "path": str(path.resolve()),
                        "allow_patterns": repo.get("allow_patterns")})
    return records
