"""A tiny fake Hugging Face Hub for download tests: an HTTP server on 127.0.0.1
and :func:`populate_cache`, which writes a pre-downloaded repo into the cache.

The server implements just what huggingface_hub (0.2x/0.3x on ``requests``, 1.x/2.x on
``httpx``/``httpx2``) uses for ``model_info``, ``list_repo_files``, ``hf_hub_download`` and
``snapshot_download``:

- ``GET /api/models/{org}/{name}[/revision/{rev}]`` -> ``{"id", "sha", "siblings"}``
- ``GET /api/models/{org}/{name}/tree/{rev}[/{path}]`` -> ``[{"type": "file", "path", ...}]``
  (one page: no ``Link`` header)
- ``HEAD|GET /{org}/{name}/resolve/{rev}/{path}`` -> ``X-Repo-Commit``, ``ETag``,
  ``X-Linked-Etag``, ``Content-Length`` (+ the bytes for GET)

No ``X-Xet-Hash`` header and no ``xetHash`` tree field is ever sent, so huggingface_hub
(with or without hf_xet installed) downloads over plain HTTP from this server.

Errors carry the ``X-Error-Code`` header huggingface_hub maps to its exception
types (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo``).
Every request is recorded in :attr:`FakeHub.requests` so tests can check which
files were fetched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def hub_client_online(monkeypatch) -> None:
    """Turn offline mode off, for inference4py and inside huggingface_hub, and let it reach 127.0.0.1.

    huggingface_hub freezes ``HF_HUB_OFFLINE`` into ``huggingface_hub.constants`` at import
    (conftest sets it to 1), so the constant is patched too.  ``NO_PROXY`` keeps a proxy from
    the environment away from the fake Hub; huggingface_hub's cached HTTP session/client read
    the proxy settings when created, so it is dropped here (and should be again after the test:
    call :func:`reset_hub_client`).
    """
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False, raising=False)
    reset_hub_client()


def reset_hub_client() -> None:
    """Drop huggingface_hub's cached HTTP session (``requests``, < 1.0) or client (``httpx``, >= 1.0)."""
    from huggingface_hub import utils

    for name in ("close_session", "reset_sessions"):  # >= 1.0, < 1.0
        reset = getattr(utils, name, None)
        if callable(reset):
            reset()
            return


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit sha
    gated: bool = False

    @property
    def commit(self) -> str:
        digest = hashlib.sha1()
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + self.files[name])
        return digest.hexdigest()

    def resolve(self, revision: str) -> str | None:
        if revision == "main" or revision == self.commit:
            return self.commit
        return self.branches.get(revision)


class FakeHub:
    """Context manager running the server in a daemon thread; ``url`` is its endpoint."""

    def __init__(self, repos: Mapping[str, FakeRepo | Mapping[str, bytes]]) -> None:
        self.repos = {
            repo_id: repo if isinstance(repo, FakeRepo) else FakeRepo(dict(repo)) for repo_id, repo in repos.items()
        }
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def downloaded(self, repo_id: str) -> set[str]:
        """Paths of ``repo_id`` whose bytes were fetched with GET."""
        prefix = f"/{repo_id}/resolve/"
        done = set()
        for method, path in self.requests:
            if method == "GET" and path.startswith(prefix):
                done.add(path[len(prefix) :].split("/", 1)[1])
        return done

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
            pass

        def do_HEAD(self) -> None:
            self._dispatch(send_body=False)

        def do_GET(self) -> None:
            self._dispatch(send_body=True)

        # -- routing -------------------------------------------------------

        def _dispatch(self, send_body: bool) -> None:
            path = urlsplit(self.path).path
            hub.requests.append((self.command, unquote(path)))
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                self._api(f"{parts[2]}/{parts[3]}", parts[4:], send_body)
            elif len(parts) >= 5 and parts[2] == "resolve":
                revision = unquote(parts[3])
                self._resolve(f"{parts[0]}/{parts[1]}", revision, unquote("/".join(parts[4:])), send_body)
            else:
                self._error(404, "RepoNotFound", "Not found", send_body)

        def _repo(self, repo_id: str, send_body: bool) -> FakeRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found", send_body)
            elif repo.gated and "authorization" not in {k.lower() for k in self.headers}:
                self._error(401, "GatedRepo", "Access to this model is restricted", send_body)
                return None
            return repo

        def _api(self, repo_id: str, rest: list[str], send_body: bool) -> None:
            repo = self._repo(repo_id, send_body)
            if repo is None:
                return
            if not rest or rest[0] == "revision":
                commit = repo.resolve(unquote(rest[1]) if len(rest) > 1 else "main")
                if commit is None:
                    self._error(404, "RevisionNotFound", "Invalid rev id", send_body)
                    return
                siblings = [{"rfilename": name} for name in sorted(repo.files)]
                self._json({"id": repo_id, "sha": commit, "private": False, "siblings": siblings}, send_body)
            elif rest[0] == "tree" and len(rest) >= 2:
                prefix = unquote("/".join(rest[2:]))
                entries = [
                    {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in sorted(repo.files.items())
                    if not prefix or name.startswith(prefix.rstrip("/") + "/")
                ]
                self._json(entries, send_body)
            else:
                self._error(404, "EntryNotFound", "Unknown endpoint", send_body)

        def _resolve(self, repo_id: str, revision: str, filename: str, send_body: bool) -> None:
            repo = self._repo(repo_id, send_body)
            if repo is None:
                return
            commit = repo.resolve(revision)
            if commit is None:
                self._error(404, "RevisionNotFound", "Invalid rev id", send_body)
                return
            data = repo.files.get(filename)
            if data is None:
                self._error(404, "EntryNotFound", "Entry not found", send_body)
                return
            etag = hashlib.sha256(data).hexdigest()  # like an LFS file
            self.send_response(200)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", f'"{etag}"')
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if send_body:
                self.wfile.write(data)

        # -- responses -----------------------------------------------------

        def _json(self, payload: object, send_body: bool) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str, send_body: bool) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

    return Handler


def populate_cache(
    cache_dir: str | os.PathLike[str],
    repo_id: str,
    files: Mapping[str, bytes | str | os.PathLike[str]],
    *,
    revision: str = "main",
    commit: str | None = None,
) -> Path:
    """Write ``files`` into a real huggingface_hub cache layout; return the snapshot folder.

    The layout is the one huggingface_hub writes: ``models--org--name/blobs/<sha256>``,
    ``snapshots/<commit>/<path>`` symlinks to the blobs (copies where symlinks are
    not available) and ``refs/<revision>`` holding the commit hash.  Values are
    bytes, or paths of local files to copy in.
    """
    contents = {name: data if isinstance(data, bytes) else Path(data).read_bytes() for name, data in files.items()}
    if commit is None:
        digest = hashlib.sha1(repo_id.encode())
        for name in sorted(contents):
            digest.update(name.encode() + b"\0" + contents[name])
        commit = digest.hexdigest()
    storage = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    blobs = storage / "blobs"
    snapshot = storage / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    for name, data in contents.items():
        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        try:
            target.symlink_to(os.path.relpath(blob, target.parent))
        except OSError:
            shutil.copyfile(blob, target)
    snapshot.mkdir(parents=True, exist_ok=True)
    if revision != commit:
        ref = storage / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return snapshot
