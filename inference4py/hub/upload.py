"""A local folder -> one commit on a Hub repo, with huggingface_hub's upload API.

:func:`upload_folder_commit` creates the repo (and the branch) when missing, then sends every file
of the folder plus extra in-memory files (the model card) as one commit: ``create_commit`` picks
LFS or a regular upload per file as the Hub's preupload answer says.  Errors are ours
(:func:`_push_errors`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from inference4py import env
from inference4py.errors import HubError, ModelNotFoundError
from inference4py.hub.failures import _http_client_errors, _status_code, _unreachable_errors
from inference4py.hub.resolve import _validate_repo_id

#: Never uploaded: version-control and tool folders, which are not part of a model.
SKIPPED_PARTS = frozenset({".git", ".cache", "__pycache__", ".ipynb_checkpoints"})


@dataclass(frozen=True)
class PushResult:
    """Where a push landed.

    Attributes:
        repo_id: The Hub repo.
        revision: The branch the commit is on.
        commit: The commit hash (what ``revision=`` takes to load exactly this upload).
        url: The commit's page on the Hub.
        files: The repo-relative paths sent, sorted.
    """

    repo_id: str
    revision: str
    commit: str
    url: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class FileInfo:
    """A file as uploaded: its size and sha256 (hex)."""

    size: int
    sha256: str


def validate_repo_id(repo_id: str) -> str:
    """``repo_id`` when it is a valid Hub repo id.

    Raises:
        ModelNotFoundError: it is not ``"namespace/name"`` of the allowed characters.
    """
    if "/" not in repo_id:
        raise ModelNotFoundError(f"'{repo_id}' is not a repo id to push to: write it 'user/name' or 'org/name'.")
    return _validate_repo_id(repo_id)


def folder_files(folder: Path) -> list[str]:
    """The folder's files as repo-relative ``/`` paths, sorted (tool folders in :data:`SKIPPED_PARTS` left out)."""
    found = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if path.is_file() and not SKIPPED_PARTS.intersection(rel.parts):
            found.append(rel.as_posix())
    return sorted(found)


def upload_folder_commit(
    folder: Path,
    repo_id: str,
    *,
    extra_files: Callable[[Mapping[str, FileInfo]], Mapping[str, bytes]],
    private: bool,
    revision: str | None,
    token: str | bool | None,
    commit_message: str,
    endpoint: str | None = None,
) -> PushResult:
    """Create ``repo_id`` (and branch ``revision``) if missing, then commit the folder and the extra files.

    ``extra_files`` gets every folder file's size and sha256 (hashed once, by huggingface_hub, for the
    upload) and returns files to add from memory (a model card); one named like a folder file
    replaces it.

    Raises:
        HubError: the token is refused, it may not write to the repo, or the Hub cannot be reached.
        ModelNotFoundError: the repo or the revision does not exist after creating it (a namespace
            the token cannot see).
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    branch = revision or "main"
    api = HfApi(endpoint=endpoint or env.hf_endpoint(), token=token)
    operations = {
        name: CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name)) for name in folder_files(folder)
    }
    infos = {name: FileInfo(op.upload_info.size, op.upload_info.sha256.hex()) for name, op in operations.items()}
    for name, data in extra_files(infos).items():
        operations[name] = CommitOperationAdd(path_in_repo=name, path_or_fileobj=data)
    with _push_errors(repo_id, branch):
        api.create_repo(repo_id, private=private, exist_ok=True)
        if branch != "main":
            api.create_branch(repo_id, branch=branch, exist_ok=True)
        info = api.create_commit(repo_id, list(operations.values()), commit_message=commit_message, revision=branch)
    return PushResult(repo_id, branch, str(info.oid), str(info.commit_url), tuple(sorted(operations)))


@contextlib.contextmanager
def _push_errors(repo_id: str, revision: str) -> Iterator[None]:
    """huggingface_hub's upload errors -> ours, saying what to do."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        yield
    except RevisionNotFoundError as exc:
        raise ModelNotFoundError(f"Branch '{revision}' of '{repo_id}' was not found on the Hub: {exc}") from exc
    except RepositoryNotFoundError as exc:
        raise ModelNotFoundError(
            f"Cannot push to '{repo_id}': the Hub has no such repo this token can see. Check the namespace "
            "(your user name or an organisation you may write to) and the token."
        ) from exc
    except HfHubHTTPError as exc:
        status = _status_code(exc)
        if status == 401:
            raise HubError(
                f"The Hub refused the token while pushing to '{repo_id}' (HTTP 401). Pass a valid write token "
                "with token=... / --token, set HF_TOKEN, or run `hf auth login`."
            ) from exc
        if status == 403:
            raise HubError(
                f"The token may not write to '{repo_id}' (HTTP 403): use a token with write access to that namespace."
            ) from exc
        raise HubError(f"The Hub answered HTTP {status or '?'} while pushing to '{repo_id}': {exc}") from exc
    except _unreachable_errors() as exc:
        raise HubError(f"the Hugging Face Hub cannot be reached ({type(exc).__name__}: {exc})") from exc
    except _http_client_errors() as exc:
        raise HubError(f"pushing to '{repo_id}' failed: {exc}") from exc
