"""The entry points: a local folder or a Hub repo id -> a local model folder.

:func:`resolve_model_folder` (folder or repo id), :func:`local_model_folder` (folder
only, never a hub look-up) and :func:`pull` (repo id only, with progress bars); the
path-or-repo-id checks happen here, the download in :mod:`inference4py.hub.download`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from inference4py.errors import ModelNotFoundError
from inference4py.hub.download import _resolve_repo


def resolve_checkpoint(
    id_or_path: str | os.PathLike[str],
    revision: str | None = None,
    token: str | bool | None = None,
    *,
    local_files_only: bool = False,
    progress: bool = True,
    variant: str | None = None,
    endpoint: str | None = None,
) -> Path:
    """Turn a local folder or a Hub repo id into a local model folder.

    Every loader calls this (the task builders, the server, the CLI).  An existing directory is returned as it is, without any hub call.  Anything
    else must be a repo id (``"org/name"``): the files the model needs (see
    :func:`select_model_files`) are downloaded into the shared Hugging Face
    cache, or taken from it when offline, and the snapshot folder is returned
    (the genai sub-folder for repos holding several genai models).

    Args:
        id_or_path: A local folder or a Hub repo id.
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
        >>> resolve_checkpoint("inference4j/flan-t5-small", revision="main")  # doctest: +SKIP
        PosixPath('/home/me/.cache/huggingface/hub/models--inference4j--flan-t5-small/snapshots/3f2a...')
    """
    text = os.fspath(id_or_path)
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


#: The older name of :func:`resolve_checkpoint`.
resolve_model_folder = resolve_checkpoint


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
