"""A model's context length, its override, and the one check that prompt + completion fit.

Effective context = ``max_position_embeddings`` override if one is set, else the model's own
``config.json`` value (``max_position_embeddings``; ``n_positions`` / ``max_sequence_length`` for other
architectures). :func:`check_fits` refuses ``prompt + completion > context`` with one line naming the
model and the numbers; the workflow calls it for every cell while it builds the DAG
(:func:`check_model_lengths`), and the train job again at start when the model's ``config.json`` could not
be found before fetching.

The override is applied the way verl's DAPO recipe does it
(``+actor_rollout_ref.model.override_config.max_position_embeddings=32768``, which verl applies to the HF
config that the actor, the reference and the vLLM rollout all read): :func:`with_context` returns a model
folder whose ``config.json`` carries the override and whose other files are links to the original. Training
loads the policy from that folder, so TRL's colocated vLLM (``LLM(model=model.name_or_path, ...)``), a
``trl vllm-serve`` started on it, every saved checkpoint (``save_pretrained`` writes the model's config)
and the evaluation's engines (``balagg generate --max-position-embeddings``) see the same number.
For RoPE models without ``rope_scaling`` (Qwen2, Qwen3) ``max_position_embeddings`` changes no
arithmetic: HF's rotary frequencies depend on ``rope_theta`` and the head size only, and vLLM sizes its
cos/sin cache and the largest accepted ``max_model_len`` by it. It lifts the limit, nothing else; positions
past the pretraining length stay extrapolation, which is what the recipe ran.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")
OVERRIDE_KEY = "max_position_embeddings"
VIEW_MARKER = "balagg-context.json"
"""Written next to the patched config.json of a :func:`with_context` folder: source and override."""


def native_context(config: dict, where: str) -> int:
    """The context length ``config`` (a parsed config.json) declares; ``where`` names it in errors."""
    for key in CONTEXT_KEYS:
        if isinstance(config.get(key), int):
            return config[key]
    text = config.get("text_config")
    if isinstance(text, dict):
        return native_context(text, where)
    raise ValueError(f"{where} gives no context length ({'/'.join(CONTEXT_KEYS)}); set max_position_embeddings")


def effective_context(config: dict, override: int | None, where: str) -> int:
    """The override if set, else :func:`native_context`."""
    if override is not None:
        if not isinstance(override, int) or isinstance(override, bool) or override < 1:
            raise ValueError(f"{where}: max_position_embeddings override must be a positive integer, got {override!r}")
        return override
    return native_context(config, where)


LENGTH_SETTINGS = {"training": ("train.max_prompt_length", "train.max_completion_length"),
                   "evaluation": ("train.max_prompt_length", "eval.max_tokens")}
"""The campaign settings that make a job's prompt and completion budgets: evaluation prompts are cut as the
training's (``train.max_prompt_length``, also in a campaign that trains nothing)."""


def check_fits(model: str, context: int, prompt: int, completion: int, what: str, override: int | None) -> None:
    """Refuse ``prompt + completion > context`` in one line naming ``model``, the numbers and the settings
    to change (:data:`LENGTH_SETTINGS` of ``what``)."""
    if prompt + completion <= context:
        return
    origin = f"the max_position_embeddings override {override}" if override is not None else \
        f"its max_position_embeddings {context}"
    prompt_key, completion_key = LENGTH_SETTINGS[what]
    raise ValueError(
        f"model {model}: {what} needs prompt {prompt} ({prompt_key}) + completion {completion} ({completion_key}) "
        f"= {prompt + completion} tokens, more than its context of {context} tokens ({origin}); lower "
        f"{prompt_key} or {completion_key}, or set max_position_embeddings of models.<name> or checkpoints.<name> "
        "(docs/cluster.md, Context length)")


def find_model_config(source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """``config.json`` of a local model folder or of a hub id's snapshot in the HF cache; None if absent.

    ``cache_dir``: the hub cache (``$HF_HUB_CACHE``, default ``$HF_HOME/hub``); nothing is downloaded."""
    folder = Path(source)
    if folder.is_dir():
        path = folder / "config.json"
        return path if path.is_file() else None
    if str(source).count("/") != 1 or str(source).startswith((".", "/")):
        return None  # neither a folder nor an owner/name hub id
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(str(source), "config.json", cache_dir=str(cache_dir) if cache_dir else None)
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def read_model_config(path: Path) -> dict:
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: cannot read the model config ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: the model config is not a JSON object")
    return config


def check_model_lengths(model: str, source: str | os.PathLike, override: int | None,
                        lengths: dict[str, tuple[int, int]], cache_dir: str | os.PathLike | None = None,
                        planned: dict | None = None) -> int | None:
    """Check every ``what -> (prompt, completion)`` of ``lengths`` against ``source``'s effective context.

    ``planned``: for a model the workflow builds, the context keys of the config.json it will write, read
    while that file does not exist yet. Returns the effective context, or None when ``source``'s config.json
    is not available yet and nothing is planned (a hub id not fetched): then the caller must check again
    where it is (the train job)."""
    if override is not None:
        context = effective_context({}, override, f"model {model}")
    else:
        path = find_model_config(source, cache_dir)
        if path is not None:
            context = effective_context(read_model_config(path), None, str(path))
        elif planned is not None:
            context = effective_context(planned, None, f"model {model} (built by the workflow)")
        else:
            return None
    for what, (prompt, completion) in lengths.items():
        check_fits(model, context, prompt, completion, what, override)
    return context


def resolve_model_dir(source: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """The local folder of a model: ``source`` itself, or a hub id's cached snapshot (never downloads)."""
    folder = Path(source)
    if folder.is_dir():
        return folder
    config = find_model_config(source, cache_dir)
    if config is None:
        raise ValueError(f"model {source}: no local folder and no snapshot in the HF cache "
                         f"({cache_dir or os.environ.get('HF_HUB_CACHE') or os.environ.get('HF_HOME') or 'default'}); "
                         "fetch it first")
    return config.parent


def with_context(source: str | os.PathLike, override: int | None, dest: str | os.PathLike,
                 cache_dir: str | os.PathLike | None = None) -> str:
    """A model folder whose context is ``override`` (module docstring); ``source`` unchanged when no override
    is set or its config already says so.

    The folder at ``dest`` holds links to ``source``'s files, a patched ``config.json`` and
    :data:`VIEW_MARKER`. Every rank of a launched job calls this at start, at the same moment, so the
    build is race-free: a folder already at ``dest`` with exactly that content is used as it is (no
    write); otherwise one process at a time (an flock on ``.<dest name>.lock`` next to it) checks again,
    builds the folder complete under a temporary name and renames it into place, moving a stale or
    half-built folder (another source or override, an older crash) aside first. A folder found complete
    is never replaced, so a rank may load from it while another is still in this function."""
    if override is None:
        return str(source)
    folder = resolve_model_dir(source, cache_dir).resolve()
    config = read_model_config(folder / "config.json")
    effective_context(config, override, str(folder / "config.json"))  # validates the override
    if config.get(OVERRIDE_KEY) == override:
        return str(source)
    if OVERRIDE_KEY not in config:
        raise ValueError(f"{folder}/config.json has no {OVERRIDE_KEY}; the override applies to models that use it")
    dest = Path(dest)
    expected = _view_content(source, folder, config, override)
    if _holds(dest, expected):
        return str(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _building(dest):
        if _holds(dest, expected):  # another process built it while this one waited
            return str(dest)
        built = _private_name(dest, "building")
        try:
            built.mkdir()  # the umask's permissions, as the folder it replaces
            _build_view(built, expected)
            if dest.exists() or dest.is_symlink():
                _move_aside(dest)
            os.rename(built, dest)
        finally:
            if built.exists():
                shutil.rmtree(built, ignore_errors=True)
    log.info("model %s: context raised from %s to %d tokens in %s", source, config.get(OVERRIDE_KEY), override, dest)
    return str(dest)


@contextmanager
def _building(dest: Path) -> Iterator[None]:
    """Hold the flock ``.<dest name>.lock`` next to ``dest`` (released by the kernel if the holder dies).
    The lock file stays: removing it would let two holders lock two different inodes."""
    fd = os.open(dest.parent / f".{dest.name.lstrip('.')}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _view_content(source, folder: Path, config: dict, override: int) -> dict[str, object]:
    """What a view folder holds: entry name -> link target (a Path) or JSON content (a dict)."""
    content: dict[str, object] = {entry.name: entry for entry in folder.iterdir()
                                  if entry.name not in ("config.json", VIEW_MARKER)}
    content["config.json"] = {**config, OVERRIDE_KEY: override}
    content[VIEW_MARKER] = {"source": str(source), "source_dir": str(folder),
                            "native": config.get(OVERRIDE_KEY), OVERRIDE_KEY: override}
    return content


def _holds(dest: Path, expected: dict[str, object]) -> bool:
    """Whether the folder ``dest`` has exactly ``expected``'s entries (a missing or unreadable one: False)."""
    try:
        if sorted(os.listdir(dest)) != sorted(expected):
            return False
        for name, want in expected.items():
            path = dest / name
            if isinstance(want, Path):
                if not path.is_symlink() or Path(os.readlink(path)) != want:
                    return False
            elif path.is_symlink() or json.loads(path.read_text()) != want:
                return False
    except (OSError, ValueError):  # gone, or moved aside while read
        return False
    return True


def _build_view(folder: Path, content: dict[str, object]) -> None:
    from balagg.io import write_json

    for name, value in content.items():
        if isinstance(value, Path):
            (folder / name).symlink_to(value)
        else:
            write_json(folder / name, value)


def _move_aside(dest: Path) -> None:
    """Rename what is at ``dest`` to a private name, then remove it (links and small JSON files: the
    source's files are not touched)."""
    aside = _private_name(dest, "stale")
    os.rename(dest, aside)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink()


def _private_name(dest: Path, what: str) -> Path:
    """A name next to ``dest`` that no other process uses."""
    return dest.parent / f".{dest.name.lstrip('.')}.{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def prepare_model(model: str, source: str | os.PathLike, override: int | None, prompt: int, completion: int,
                  dest: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> tuple[str, dict]:
    """The train job's first step, before any model is loaded: check that ``prompt + completion`` fit
    ``source``'s effective context (the DAG build could not when the model was not fetched yet), then
    return the folder to load (:func:`with_context`) and the manifest's context record."""
    path = find_model_config(source, cache_dir)
    if path is None and override is None:
        from huggingface_hub import hf_hub_download  # honours HF_HUB_OFFLINE; only config.json

        try:
            path = Path(hf_hub_download(str(source), "config.json", cache_dir=str(cache_dir) if cache_dir else None))
        except Exception as error:  # offline and not cached, unknown repo, no network: say which model
            raise ValueError(f"model {model}: cannot read config.json of {source} to check its context "
                             f"({type(error).__name__}); fetch the model first") from None
    native = native_context(read_model_config(path), str(path)) if path is not None else None
    context = override if override is not None else native
    check_fits(model, context, prompt, completion, "training", override)
    log.info("model %s: prompt %d + completion %d <= context %d (native %s, override %s), checked at job start",
             model, prompt, completion, context, native, override)
    record = {"native": native, "override": override, "effective": context,
              "max_prompt_length": prompt, "max_completion_length": completion}
    return with_context(source, override, dest, cache_dir), record
