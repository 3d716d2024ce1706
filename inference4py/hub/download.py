"""Fetching a repo's model files into the Hugging Face cache with huggingface_hub.

Lists the repo, selects one layout (:mod:`inference4py.hub.files`), downloads just those
files with ``snapshot_download`` (progress bars on or off), and falls back to the cache
(:mod:`inference4py.hub.cache`) when offline or when the Hub cannot be reached.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from inference4py import env
from inference4py.errors import HubError
from inference4py.hub.cache import _from_cache, _read_json
from inference4py.hub.failures import _hub_errors, _status_code, _unreachable_errors
from inference4py.hub.files import _select

# The name of the single-module days, kept so that log configuration and filters still match.
logger = logging.getLogger("inference4py.hub")


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

    cache_dir = env.hf_hub_cache()
    endpoint = endpoint or env.hf_endpoint()
    if local_files_only:
        return _from_cache(repo_id, revision, variant, cache_dir, reason="local_files_only=True was passed")
    offline_setting = env.offline_setting()
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


def download_file(
    repo_id: str,
    filename: str,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    local_files_only: bool = False,
) -> Path:
    """One file of a Hub repo, through the Hugging Face cache, with the library's cache, endpoint and
    offline settings (offline, or with ``local_files_only``, only the cache is looked at).

    Raises:
        HubError, ModelNotFoundError: as :func:`~inference4py.hub.failures._hub_errors` maps
            huggingface_hub's errors (the original is the ``__cause__``).
    """
    from huggingface_hub import hf_hub_download

    with _hub_errors(repo_id, revision):
        local = hf_hub_download(
            repo_id,
            filename,
            revision=revision,
            token=token,
            cache_dir=env.hf_hub_cache(),
            endpoint=env.hf_endpoint(),
            local_files_only=local_files_only or env.offline(),
        )
    return Path(local)


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
