"""``python -m balagg fetch``: snapshot a campaign's models and datasets into a shared hub cache.

    python -m balagg fetch --hf-home /shared/hf --model Qwen/Qwen3-1.7B \\
        --dataset math500=HuggingFaceH4/MATH-500 --dataset dapo-math-17k=BytedTsinghua-SIA/DAPO-Math-17k \\
        --out results/paper/fetch.json

Run once on a host with network access (the workflow's local ``fetch`` rule does it on the submit host);
compute jobs then read the same ids from ``{hf-home}/hub`` with ``HF_HUB_OFFLINE=1``. A dataset is
``NAME=HUB_ID`` with NAME from balagg.data's registry, which says which file or subset to download.
With ``HF_HUB_OFFLINE=1`` nothing is downloaded: every snapshot must already be in the cache.
``fetch.json`` records each repository's commit hash and snapshot folder (the campaign's revisions); a
model given as ``ORG/NAME@REVISION`` is fetched at that commit, branch or tag, recorded with both.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fetch", help="snapshot models and datasets into a shared hub cache",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hf-home", default=None, help="HF_HOME of the shared cache (default: huggingface_hub's)")
    parser.add_argument("--model", action="append", default=[],
                        help="model hub id, or ORG/NAME@REVISION at a commit, branch or tag (repeatable)")
    parser.add_argument("--dataset", action="append", default=[], help="NAME=HUB_ID (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="fetch.json (the revisions), written last")
    parser.set_defaults(func=run)


def dataset_repo(spec: str) -> dict:
    """``NAME=HUB_ID`` -> the repository to fetch, with the registry's file or subset as the pattern."""
    from balagg.data.sources import get_source
    from balagg.hub import allow_patterns

    name, sep, repo_id = spec.partition("=")
    if not sep or not name or not repo_id:
        raise ValueError(f"--dataset {spec!r}: expected NAME=HUB_ID, e.g. math500=HuggingFaceH4/MATH-500")
    source = get_source(name)
    data_file = source.hub_file if repo_id == source.hub_id else None
    return {"repo_id": repo_id, "repo_type": "dataset", "name": name,
            "allow_patterns": allow_patterns("dataset", subset=source.subset, data_file=data_file)}


def model_repo(spec: str) -> dict:
    """``ORG/NAME`` or ``ORG/NAME@REVISION`` -> the model repository to fetch (at that revision)."""
    from balagg.external_checkpoints import split_pinned

    repo_id, revision = split_pinned(spec)
    return {"repo_id": repo_id, "repo_type": "model", **({"revision": revision} if revision else {})}


def run(args: argparse.Namespace) -> int:
    import json

    from balagg.hub import fetch, hub_cache
    from balagg.io import write_json

    repos = [model_repo(m) for m in dict.fromkeys(args.model)]
    repos += [dataset_repo(spec) for spec in dict.fromkeys(args.dataset)]
    if not repos:
        raise ValueError("fetch: nothing to fetch (give --model and/or --dataset)")
    records = fetch(repos, args.hf_home)
    for repo, record in zip(repos, records, strict=True):
        if "name" in repo:
            record["name"] = repo["name"]
    import balagg

    cache = hub_cache(args.hf_home)
    write_json(args.out, {"hf_home": str(Path(args.hf_home).resolve()) if args.hf_home else None,
                          "hub_cache": str(cache.resolve()), "repos": records,
                          "code": {"balagg": balagg.__version__, "path": str(Path(balagg.__file__).parent)}})
    print(json.dumps({"out": str(args.out), "repos": {r["repo_id"]: r["commit"] for r in records}}))
    return 0
