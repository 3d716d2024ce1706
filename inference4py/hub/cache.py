"""Serving a model from the local Hugging Face cache only (offline, local_files_only, Hub down).

The cached snapshot is checked to hold a complete layout (:mod:`inference4py.hub.files`);
a missing or incomplete one raises a :class:`~inference4py.errors.HubError` that says how
to complete it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from inference4py.errors import HubError, ModelFilesMissingError
from inference4py.hub.files import _select


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
                f"Download it first with `{pull_command}` while online.",
                fix="local_folder",
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
            f"Complete it with `{pull_command}` while online.",
            fix="local_folder",
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
