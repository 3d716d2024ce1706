"""Model id or local path -> local model folder.

A model is either a local folder, returned as it is, or a Hugging Face Hub repo
id (``"org/name"``).  Repos are fetched with huggingface_hub into the standard
shared cache (``~/.cache/huggingface/hub``), so the files are shared with
transformers, optimum and every other tool using that cache.  Only the files the
model needs are downloaded: the config/tokenizer files plus the ONNX graphs of
ONE layout (see :func:`select_model_files`), never every quantized variant a
repo happens to hold.

Offline mode (``HF_HUB_OFFLINE=1`` or ``INFERENCE4PY_OFFLINE=1``, read at call
time, see :mod:`inference4py._env`) and ``local_files_only=True`` serve models
from the cache only.  When the Hub cannot be reached the cache is used as a
fallback.

Example:
    >>> from inference4py.hub import resolve_model_folder
    >>> folder = resolve_model_folder("inference4j/gpt2")  # doctest: +SKIP
    >>> sorted(p.name for p in folder.iterdir())  # doctest: +SKIP
    ['config.json', 'generation_config.json', 'merges.txt', 'model.onnx', ...]
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference4py import _env
from inference4py.errors import HubError, ModelFilesMissingError, ModelNotFoundError

__all__ = [
    "SUPPORT_FILES",
    "KNOWN_VARIANTS",
    "resolve_model_folder",
    "local_model_folder",
    "pull",
    "select_model_files",
]

logger = logging.getLogger(__name__)

#: Config, tokenizer and generation files fetched with every model (when present),
#: from the repo root and from the model's own folder.  ``*.spm`` files too.
SUPPORT_FILES: frozenset[str] = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "spiece.model",
        "tokenizer.model",
        "sentencepiece.bpe.model",
        "chat_template.jinja",
        "preprocessor_config.json",
        "normalizer.json",
        "genai_config.json",
        "inference4py.json",
    }
)

#: File-name suffixes of the precision variants exported next to the full-precision
#: graphs (transformers.js / optimum naming: ``model_fp16.onnx``, ...).
KNOWN_VARIANTS: tuple[str, ...] = ("fp16", "quantized", "q4", "q4f16", "int8", "uint8", "bnb4")

# Graph sets in order of preference; names without ".onnx" and without variant suffix.
_LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("model",),
    ("encoder_model", "decoder_model_merged"),
    ("encoder_model", "decoder_model", "decoder_with_past_model"),
    ("decoder_model_merged",),
    # Older or cache-less optimum exports, only when nothing above is present.
    ("decoder_model", "decoder_with_past_model"),
    ("encoder_model", "decoder_model"),
    ("decoder_model",),
)
_ONNX_SUBFOLDER = "onnx"
_GENAI_CONFIG = "genai_config.json"
_DATA_SUFFIXES = ("_data", ".data")


@dataclass(frozen=True)
class _Selection:
    files: list[str]  # repo-relative paths, sorted
    folder: str  # the model folder inside the repo ("" = root); genai sub-folders only
    layout: str  # human-readable, for messages and logs
    genai_config: str | None  # path of the genai_config.json that drives the layout


# --------------------------------------------------------------------------- selection


def select_model_files(
    repo_files: Sequence[str],
    variant: str | None = None,
    *,
    genai_config: Mapping[str, Any] | None = None,
) -> list[str]:
    """Pick the files one model needs from a repo listing.

    The ONNX graphs of one layout are chosen, in this order:

    1. a genai folder at the root (``genai_config.json``): the graphs it names
       (all root ``*.onnx`` when ``genai_config`` is not given);
    2. root ``model.onnx``;
    3. root ``encoder_model.onnx`` + ``decoder_model_merged.onnx``;
    4. root ``encoder_model.onnx`` + ``decoder_model.onnx`` + ``decoder_with_past_model.onnx``;
    5. root ``decoder_model_merged.onnx``
       (then older exports: ``decoder_model`` + ``decoder_with_past_model``,
       ``encoder_model`` + ``decoder_model``, ``decoder_model``);
    6. a genai sub-folder (when there are several, ``variant`` names one, e.g.
       ``"cpu-int4-rtn-block-32-acc-level-4"``);
    7. the ``onnx/`` sub-folder of transformers.js repos, same order as 2-5.

    ``variant`` selects precision variants by suffix (``"fp16"`` ->
    ``model_fp16.onnx``); None (or ``"fp32"``) means the full-precision files.
    The external-data files of the chosen graphs (``<name>.onnx_data``,
    ``<name>.onnx.data``, ``<name>.onnx_data_*``) and the config/tokenizer files
    in :data:`SUPPORT_FILES` (plus ``*.spm``) come along.

    Args:
        repo_files: Repo-relative paths with ``/`` separators, e.g. from
            ``HfApi().list_repo_files``.
        variant: Precision variant suffix or genai folder name.
        genai_config: The parsed ``genai_config.json`` of the genai folder, when
            known; its ``filename`` entries name the graphs to take.

    Returns:
        The selected paths, sorted.

    Raises:
        ModelFilesMissingError: no complete ONNX layout is in the listing; the
            message lists what was found and what is expected.

    Example:
        >>> select_model_files(["README.md", "config.json", "model.onnx", "model.onnx_data",
        ...                     "onnx/model_fp16.onnx"])
        ['config.json', 'model.onnx', 'model.onnx_data']
    """
    return _select(repo_files, variant, genai_config=genai_config).files


def _select(
    repo_files: Sequence[str],
    variant: str | None,
    *,
    genai_config: Mapping[str, Any] | None = None,
    source: str = "the repository",
) -> _Selection:
    files = sorted({f.replace("\\", "/").lstrip("/") for f in repo_files})
    present = set(files)
    variant = _normalize_variant(variant)
    genai_folders = sorted(posixpath.dirname(f) for f in files if posixpath.basename(f) == _GENAI_CONFIG)

    def finish(folder: str, graphs: list[str], layout: str, genai: str | None = None) -> _Selection:
        chosen = set(graphs)
        for graph in graphs:
            chosen.update(_data_files(graph, files))
        for f in files:
            if posixpath.dirname(f) in {"", folder} and _is_support_file(f):
                chosen.add(f)
        return _Selection(sorted(chosen), folder, layout, genai)

    # 1. A genai folder at the root: its config is authoritative.
    if variant is None and "" in genai_folders:
        graphs = _genai_graphs("", files, genai_config, source)
        if graphs:
            return finish("", graphs, "onnxruntime-genai folder", _GENAI_CONFIG)

    # 2-5. The optimum / inference4j layouts at the root.
    found = _find_layout("", present, variant)
    if found is not None:
        return finish("", found, " + ".join(found))

    # 6. genai sub-folders (e.g. microsoft/Phi-3-mini-4k-instruct-onnx).
    sub_genai = [g for g in genai_folders if g]
    candidates = sub_genai if variant is None else [g for g in sub_genai if variant in {g, posixpath.basename(g)}]
    if len(candidates) == 1:
        folder = candidates[0]
        graphs = _genai_graphs(folder, files, genai_config, source)
        if graphs:
            return finish(folder, graphs, f"onnxruntime-genai folder {folder}/", f"{folder}/{_GENAI_CONFIG}")
    elif len(candidates) > 1:
        listing = ", ".join(repr(g) for g in candidates)
        raise ModelFilesMissingError(
            f"{source.capitalize()} holds several onnxruntime-genai models ({listing}); "
            "choose one with variant=<folder>, e.g. variant=" + repr(posixpath.basename(candidates[0])) + ".",
            missing=[],
        )

    # 7. The onnx/ sub-folder of transformers.js repos.
    found = _find_layout(_ONNX_SUBFOLDER, present, variant)
    if found is not None:
        return finish("", found, " + ".join(found))

    raise ModelFilesMissingError(_no_layout_message(files, variant, sub_genai, source), missing=["model.onnx"])


def _normalize_variant(variant: str | None) -> str | None:
    if variant is None:
        return None
    variant = variant.strip().strip("/")
    if variant in {"", "fp32"}:
        return None
    return variant


def _graph_name(folder: str, base: str, variant: str | None) -> str:
    name = f"{base}.onnx" if variant is None else f"{base}_{variant}.onnx"
    return f"{folder}/{name}" if folder else name


def _find_layout(folder: str, present: set[str], variant: str | None) -> list[str] | None:
    for layout in _LAYOUTS:
        graphs = [_graph_name(folder, base, variant) for base in layout]
        if all(g in present for g in graphs):
            return graphs
    return None


def _data_files(graph: str, files: Sequence[str]) -> list[str]:
    exact = {graph + suffix for suffix in _DATA_SUFFIXES}
    return [f for f in files if f in exact or f.startswith(graph + "_data_")]


def _is_support_file(path: str) -> bool:
    name = posixpath.basename(path)
    return name in SUPPORT_FILES or name.endswith(".spm")


def _genai_graphs(folder: str, files: Sequence[str], genai_config: Mapping[str, Any] | None, source: str) -> list[str]:
    """The graphs of a genai folder: those its config names, else all its *.onnx."""
    in_folder = [f for f in files if posixpath.dirname(f) == folder and f.endswith(".onnx")]
    if genai_config is None:
        return in_folder
    named = sorted({posixpath.join(folder, name) for name in _genai_filenames(genai_config.get("model", {}))})
    missing = [g for g in named if g not in set(files)]
    if missing:
        raise ModelFilesMissingError(
            f"{folder or '.'}/{_GENAI_CONFIG} in {source} names ONNX files that are not there: " + ", ".join(missing),
            missing=missing,
        )
    return named or in_folder


def _genai_filenames(node: Any) -> Iterator[str]:
    """Every ``"filename": "*.onnx"`` entry of genai_config.json's ``model`` section."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "filename" and isinstance(value, str) and value.endswith(".onnx"):
                yield value
            else:
                yield from _genai_filenames(value)
    elif isinstance(node, list):
        for item in node:
            yield from _genai_filenames(item)


_VARIANT_RE = re.compile(
    r"^(?:onnx/)?(?:model|encoder_model|decoder_model|decoder_model_merged|decoder_with_past_model)_(\w+)\.onnx$"
)


def _no_layout_message(files: list[str], variant: str | None, genai_folders: list[str], source: str) -> str:
    onnx_files = [f for f in files if f.endswith(".onnx")]
    wanted = "" if variant is None else f" for variant {variant!r}"
    lines = [f"No ONNX model{wanted} found in {source}."]
    if onnx_files:
        shown = ", ".join(onnx_files[:15]) + (f", ... ({len(onnx_files)} in all)" if len(onnx_files) > 15 else "")
        lines.append(f"ONNX files found: {shown}.")
    else:
        shown = ", ".join(files[:15]) + (f", ... ({len(files)} files in all)" if len(files) > 15 else "")
        lines.append(f"No .onnx file at all; files found: {shown or 'none'}.")
    lines.append(
        "Expected one of: model.onnx; encoder_model.onnx + decoder_model_merged.onnx; "
        "encoder_model.onnx + decoder_model.onnx + decoder_with_past_model.onnx; "
        "decoder_model_merged.onnx; a folder with genai_config.json; "
        "or the same names under onnx/."
    )
    variants = sorted({m.group(1) for f in onnx_files if (m := _VARIANT_RE.match(f))})
    if variants or genai_folders:
        choices = variants + [posixpath.basename(g) for g in genai_folders]
        lines.append("Available variants: " + ", ".join(choices) + " (pass variant=...).")
    elif not onnx_files:
        lines.append(
            "If this is a PyTorch/safetensors model, export it first, e.g. "
            "`optimum-cli export onnx --model <id> <folder>`, and pass the folder."
        )
    return " ".join(lines)


# --------------------------------------------------------------------------- resolution


def resolve_model_folder(
    model: str | os.PathLike[str],
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
    progress: bool = True,
    variant: str | None = None,
    endpoint: str | None = None,
) -> Path:
    """Turn a local folder or a Hub repo id into a local model folder.

    An existing directory is returned as it is, without any hub call.  Anything
    else must be a repo id (``"org/name"``): the files the model needs (see
    :func:`select_model_files`) are downloaded into the shared Hugging Face
    cache, or taken from it when offline, and the snapshot folder is returned
    (the genai sub-folder for repos holding several genai models).

    Args:
        model: A local folder or a Hub repo id.
        revision: Branch, tag or commit hash; default the repo's main branch.
        token: Hub token for private/gated repos; None uses ``HF_TOKEN`` or the
            saved login, False sends none.
        local_files_only: Never touch the network, use the cache only.
        progress: Show huggingface_hub's download progress bars.
        variant: Precision variant (``"fp16"``, ``"quantized"``, ...) or genai
            folder to download instead of the full-precision graphs.
        endpoint: Hub URL; default ``HF_ENDPOINT`` or huggingface.co.

    Returns:
        The local model folder.

    Raises:
        ModelNotFoundError: the path does not exist, or the repo or revision
            does not exist on the Hub (private repos need a token).
        ModelFilesMissingError: the repo holds no ONNX model this library can run.
        HubError: offline (or the Hub is unreachable) and the model is not cached,
            the repo is gated, or the download failed.

    Example:
        >>> resolve_model_folder("inference4j/flan-t5-small")  # doctest: +SKIP
        PosixPath('/home/me/.cache/huggingface/hub/models--inference4j--flan-t5-small/snapshots/3f2a...')
    """
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelNotFoundError(
            f"'{text}' is a file, not a model folder; pass the folder that contains the model's files."
        )
    if _looks_like_path(text):
        raise ModelNotFoundError(
            f"Model folder '{text}' does not exist (resolved to '{path.absolute()}'). "
            "Check the path, or pass a Hugging Face repo id such as 'org/name'."
        )
    repo_id = _validate_repo_id(text)
    return _resolve_repo(
        repo_id,
        revision=revision,
        token=token,
        local_files_only=local_files_only,
        progress=progress,
        variant=variant,
        endpoint=endpoint,
    )


def local_model_folder(path: str | os.PathLike[str]) -> Path:
    """An existing local model folder (``~`` expanded); never a hub look-up.

    For ``model_path(...)``-style options, where a missing folder must not be
    mistaken for a repo id.

    Raises:
        ModelNotFoundError: the folder does not exist or is a file.
    """
    text = os.fspath(path)
    folder = Path(text).expanduser()
    if folder.is_dir():
        return folder
    if folder.exists():
        raise ModelNotFoundError(
            f"'{text}' is a file, not a model folder; pass the folder that contains the model's files."
        )
    hint = "" if _looks_like_path(text) else " To download from the Hugging Face Hub, pass it as a model id instead."
    raise ModelNotFoundError(f"Model folder '{text}' does not exist (resolved to '{folder.absolute()}').{hint}")


def pull(
    model_id: str,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    variant: str | None = None,
    endpoint: str | None = None,
) -> Path:
    """Download a model's files into the Hugging Face cache, with progress bars.

    Unlike :func:`resolve_model_folder`, ``model_id`` is always a Hub repo id,
    even when a local folder of that name exists.  In offline mode the cached
    copy is checked and returned.

    Returns:
        The snapshot folder.

    Raises:
        Same as :func:`resolve_model_folder`.

    Example:
        >>> pull("inference4j/gpt2", variant="fp16")  # doctest: +SKIP
    """
    return _resolve_repo(
        _validate_repo_id(model_id),
        revision=revision,
        token=token,
        local_files_only=False,
        progress=True,
        variant=variant,
        endpoint=endpoint,
    )


def _looks_like_path(text: str) -> bool:
    return (
        text.startswith((".", "/", "~", "\\"))
        or os.path.isabs(text)
        or re.match(r"^[A-Za-z]:", text) is not None
        or "\\" in text
        or text.count("/") >= 2
        or text.count(os.sep) >= 2
        or text.endswith(("/", os.sep))
    )


def _validate_repo_id(text: str) -> str:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as exc:
        raise ModelNotFoundError(
            f"'{text}' is neither an existing folder nor a valid Hugging Face repo id "
            "('org/name': letters, digits, '-', '_', '.'; at most 96 characters)."
        ) from exc
    return text


def _resolve_repo(
    repo_id: str,
    *,
    revision: str | None,
    token: str | bool | None,
    local_files_only: bool,
    progress: bool,
    variant: str | None,
    endpoint: str | None,
) -> Path:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    cache_dir = _env.hf_hub_cache()
    endpoint = endpoint or _env.hf_endpoint()
    if local_files_only:
        return _from_cache(repo_id, revision, variant, cache_dir, reason="local_files_only=True was passed")
    offline_setting = _env.offline_setting()
    if offline_setting is not None:
        reason = f"offline mode is on ({offline_setting})"
        return _from_cache(repo_id, revision, variant, cache_dir, reason=reason)

    try:
        with _hub_errors(repo_id, revision):
            repo_files = _list_repo_files(repo_id, revision=revision, token=token, endpoint=endpoint)
    except HubError as exc:
        cause = exc.__cause__
        network_down = isinstance(cause, _unreachable_errors())
        server_error = (
            isinstance(cause, HfHubHTTPError)
            and not isinstance(cause, (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError))
            and (_status_code(cause) or 0) >= 500
        )
        if not (network_down or server_error):
            raise
        logger.warning("Cannot reach the Hugging Face Hub (%s); looking for %s in the local cache.", cause, repo_id)
        return _from_cache(repo_id, revision, variant, cache_dir, reason=str(exc), cause=cause)

    source = f"repository '{repo_id}'" + (f" at revision '{revision}'" if revision else "")
    selection = _select(repo_files, variant, source=source)
    if selection.genai_config is not None:
        # The genai config names the graphs to fetch; it is small, fetch it first.
        with _hub_errors(repo_id, revision):
            config = _download_json(
                repo_id, selection.genai_config, revision=revision, token=token, endpoint=endpoint, cache_dir=cache_dir
            )
        selection = _select(repo_files, variant, genai_config=config, source=source)
    logger.info("Fetching %s (%s): %s", repo_id, selection.layout, ", ".join(selection.files))

    with _hub_errors(repo_id, revision), _progress_bars(progress):
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(
            repo_id,
            revision=revision,
            token=token,
            cache_dir=cache_dir,
            endpoint=endpoint,
            allow_patterns=[_escape_pattern(f) for f in selection.files],
        )
    return Path(snapshot) / selection.folder if selection.folder else Path(snapshot)


def _list_repo_files(
    repo_id: str, *, revision: str | None, token: str | bool | None, endpoint: str | None
) -> list[str]:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    info = api.model_info(repo_id, revision=revision, token=token, files_metadata=False)
    files = [sibling.rfilename for sibling in info.siblings or []]
    if not files:  # very large repos come without a sibling list
        files = api.list_repo_files(repo_id, revision=revision, token=token)
    return files


def _download_json(
    repo_id: str,
    filename: str,
    *,
    revision: str | None,
    token: str | bool | None,
    endpoint: str | None,
    cache_dir: Path,
) -> dict[str, Any]:
    from huggingface_hub import hf_hub_download

    local = hf_hub_download(repo_id, filename, revision=revision, token=token, endpoint=endpoint, cache_dir=cache_dir)
    return _read_json(Path(local), f"{filename} of '{repo_id}'")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise HubError(f"Cannot read {what} ({path}): {exc}") from exc
    if not isinstance(data, dict):
        raise HubError(f"{what} ({path}) is not a JSON object.")
    return data


def _from_cache(
    repo_id: str,
    revision: str | None,
    variant: str | None,
    cache_dir: Path,
    *,
    reason: str,
    cause: BaseException | None = None,
) -> Path:
    """The cached snapshot of the repo, checked to hold a complete model."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    label = f"'{repo_id}'" + (f" (revision '{revision}')" if revision else "")
    pull_command = f"inference4py pull {repo_id}" + (f" --revision {revision}" if revision else "")
    pull_command += f" --variant {variant}" if variant else ""
    try:
        snapshot = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True))
    except LocalEntryNotFoundError as exc:
        # huggingface_hub >= 1.x raises IncompleteSnapshotError (a LocalEntryNotFoundError) when the
        # snapshot lacks files of the repo's cached tree listing -- always the case here, since only
        # one layout is downloaded.  The snapshot is usable if it holds that layout: checked below.
        partial = getattr(exc, "snapshot_path", None)
        if partial is None or not Path(partial).is_dir():
            raise HubError(
                f"Model {label} is not in the local Hugging Face cache ({cache_dir}) and {reason}. "
                f"Download it first with `{pull_command}` while online, or pass a local folder with model_path(...)."
            ) from (cause or exc)
        snapshot = Path(partial)

    source = f"the cached snapshot {snapshot}"
    files = _local_files(snapshot)
    try:
        selection = _select(files, variant, source=source)
        if selection.genai_config is not None:
            config = _read_json(snapshot / selection.genai_config, selection.genai_config)
            selection = _select(files, variant, genai_config=config, source=source)
    except ModelFilesMissingError as exc:
        raise HubError(
            f"Model {label} is in the local Hugging Face cache but incomplete, and {reason}: {exc} "
            f"Complete it with `{pull_command}` while online, or pass a local folder with model_path(...)."
        ) from exc
    return snapshot / selection.folder if selection.folder else snapshot


def _local_files(folder: Path) -> list[str]:
    """Repo-relative paths of the regular files (symlinks followed) under ``folder``."""
    found = []
    for root, _dirs, names in os.walk(folder, followlinks=True):
        for name in names:
            full = os.path.join(root, name)
            if os.path.isfile(full):  # skips dangling symlinks of interrupted downloads
                found.append(Path(os.path.relpath(full, folder)).as_posix())
    return found


@contextlib.contextmanager
def _hub_errors(repo_id: str, revision: str | None) -> Iterator[None]:
    """Translate huggingface_hub / requests / httpx errors into inference4py errors."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    unreachable = _unreachable_errors()
    request_failed = _http_client_errors()
    try:
        yield
    except GatedRepoError as exc:
        raise HubError(
            f"Model '{repo_id}' is gated: accept its license on https://huggingface.co/{repo_id} "
            "while logged in, then pass token=... or set HF_TOKEN (or run `hf auth login`)."
        ) from exc
    except RepositoryNotFoundError as exc:
        raise ModelNotFoundError(
            f"Model '{repo_id}' was not found on the Hugging Face Hub. Check the id; if the repo is "
            "private, pass token=... or set HF_TOKEN (or run `hf auth login`)."
        ) from exc
    except RevisionNotFoundError as exc:
        raise ModelNotFoundError(
            f"Revision '{revision}' of model '{repo_id}' was not found on the Hugging Face Hub; "
            "pass an existing branch, tag or commit hash."
        ) from exc
    except LocalEntryNotFoundError as exc:
        raise HubError(
            f"Cannot download '{repo_id}' and it is not in the local cache ({_env.hf_hub_cache()}): {exc}"
        ) from exc
    except unreachable as exc:
        raise HubError(f"the Hugging Face Hub cannot be reached ({type(exc).__name__}: {exc})") from exc
    except HfHubHTTPError as exc:
        status = _status_code(exc) or "?"
        raise HubError(f"the Hugging Face Hub answered HTTP {status} for '{repo_id}': {exc}") from exc
    except request_failed as exc:
        raise HubError(f"downloading '{repo_id}' failed: {exc}") from exc


# huggingface_hub < 1.0 talks HTTP through ``requests``; 1.x through ``httpx``; 2.x through
# ``httpx2``.  Only the client library huggingface_hub imported can raise, so the exception
# types are looked up in sys.modules instead of importing (or requiring) any of them.
_HTTP_CLIENTS = ("requests", "httpx", "httpx2")


def _unreachable_errors() -> tuple[type[BaseException], ...]:
    """Exception types meaning "the Hub cannot be reached" (connection, timeout, proxy, offline)."""
    errors: list[type[BaseException]] = [ConnectionError]  # includes huggingface_hub's OfflineModeIsEnabled
    for name in _HTTP_CLIENTS:
        module = sys.modules.get(name)
        if module is None:
            continue
        attrs: tuple[str, ...]
        if name == "requests":  # requests' ProxyError is a ConnectionError
            attrs = ("ConnectionError", "Timeout")
        else:  # httpx / httpx2: TransportError minus UnsupportedProtocol (a bad URL, not a network problem)
            attrs = ("NetworkError", "TimeoutException", "ProxyError", "ProtocolError")
        errors.extend(_exception_types(module, attrs))
    return tuple(errors)


def _http_client_errors() -> tuple[type[BaseException], ...]:
    """Base exception types of the HTTP client libraries: any other failed request."""
    errors: list[type[BaseException]] = []
    for name in _HTTP_CLIENTS:
        module = sys.modules.get(name)
        if module is not None:
            errors.extend(_exception_types(module, ("RequestException", "HTTPError")))
    return tuple(errors)


def _exception_types(module: Any, names: Sequence[str]) -> list[type[BaseException]]:
    found = (getattr(module, name, None) for name in names)
    return [t for t in found if isinstance(t, type) and issubclass(t, BaseException)]


def _status_code(exc: BaseException) -> int | None:
    """The HTTP status of a huggingface_hub HTTP error (requests or httpx response), if any."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Silence huggingface_hub's progress bars for the duration, when asked to."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if enabled or are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


def _escape_pattern(path: str) -> str:
    """An fnmatch pattern matching exactly ``path`` (allow_patterns are globs)."""
    return re.sub(r"([*?\[])", r"[\1]", path)
