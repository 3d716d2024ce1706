"""A tiny fake Hugging Face Hub for download and upload tests: an HTTP server on 127.0.0.1
and :func:`populate_cache`, which writes a pre-downloaded repo into the cache.

The server implements just what huggingface_hub (0.2x/0.3x on ``requests``, 1.x/2.x on
``httpx``/``httpx2``) uses for ``model_info``, ``list_repo_files``, ``hf_hub_download`` and
``snapshot_download``:

- ``GET /api/models/{org}/{name}[/revision/{rev}]`` -> ``{"id", "sha", "siblings"}``
- ``GET /api/models/{org}/{name}/tree/{rev}[/{path}]`` -> ``[{"type": "file", "path", ...}]``
  (one page: no ``Link`` header)
- ``HEAD|GET /{org}/{name}/resolve/{rev}/{path}`` -> ``X-Repo-Commit``, ``ETag``,
  ``X-Linked-Etag``, ``Content-Length`` (+ the bytes for GET)

and for ``create_repo``, ``create_branch`` and ``create_commit`` / ``upload_folder``:

- ``POST /api/repos/create`` (``{"name", "organization", "private"}``, or ``"visibility"`` from 2.0)
  -> ``{"url"}``; 409 when it exists
- ``POST /api/models/{org}/{name}/branch/{branch}`` -> a branch from main; 409 when it exists
- ``POST /api/validate-yaml`` -> no errors (a README.md in a commit is checked first)
- ``POST /api/models/{org}/{name}/preupload/{rev}`` -> ``uploadMode`` per file: ``lfs`` for the
  suffixes a new repo's .gitattributes stores in LFS (``.onnx``, ``.onnx_data``, ``.bin``, ...), a
  binary sample (a NUL byte) or :attr:`FakeHub.lfs_threshold` bytes and more, else ``regular``
- ``POST /{org}/{name}.git/info/lfs/objects/batch`` -> the ``basic`` transfer (never ``xet``,
  even when the client offers it) with a ``PUT /lfs/{oid}`` upload action; the PUT is checked
  against the sha256 it names
- ``POST /api/models/{org}/{name}/commit/{rev}`` (ndjson: ``header``, ``file`` base64,
  ``lfsFile`` by oid) -> ``{"commitUrl", "commitOid"}``

No ``X-Xet-Hash`` header and no ``xetHash`` tree field is ever sent, so huggingface_hub
(with or without hf_xet installed) downloads over plain HTTP from this server.  Uploads are LFS
only, as on a Hub without Xet storage: huggingface_hub >= 1.0 uploads through Xet whenever hf_xet
is installed, so upload tests turn it off (``HF_HUB_DISABLE_XET``).

With ``tokens``, a request carrying any other bearer token is refused with 401, as the Hub
refuses invalid credentials; writes need one of them, and a ``private`` repo is "not found"
(404 ``RepoNotFound``) without one.  With ``namespaces`` (token -> the users or organisations it
may write to), a write elsewhere is a 403.

Errors carry the ``X-Error-Code`` header huggingface_hub maps to its exception
types (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo``).
Every request is recorded in :attr:`FakeHub.requests` so tests can check which
files were fetched.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Collection, Mapping
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


# What the .gitattributes of a new Hub repo sends to LFS (a part of it).
_LFS_SUFFIXES = (".onnx", ".onnx_data", ".data", ".bin", ".gguf", ".safetensors", ".pt", ".model", ".npz")


def _commit_of(files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha1()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    return digest.hexdigest()


@dataclass
class FakeRepo:
    files: dict[str, bytes]  # main's files
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit sha (of main's files)
    gated: bool = False
    private: bool = False
    heads: dict[str, dict[str, bytes]] = field(default_factory=dict)  # branches with files of their own (pushed)

    @property
    def commit(self) -> str:
        return _commit_of(self.files)

    def resolve(self, revision: str) -> str | None:
        found = self.snapshot(revision)
        return found[0] if found is not None else None

    def snapshot(self, revision: str) -> tuple[str, dict[str, bytes]] | None:
        """(commit, files) of a branch name or commit hash; None when there is none."""
        if revision == "main" or revision == self.commit:
            return self.commit, self.files
        if revision in self.branches:
            return self.branches[revision], self.files
        for name, files in self.heads.items():
            if revision in (name, _commit_of(files)):
                return _commit_of(files), files
        return None


class FakeHub:
    """Context manager running the server in a daemon thread; ``url`` is its endpoint."""

    def __init__(
        self,
        repos: Mapping[str, FakeRepo | Mapping[str, bytes]] | None = None,
        *,
        tokens: Collection[str] = (),
        namespaces: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self.repos = {
            repo_id: repo if isinstance(repo, FakeRepo) else FakeRepo(dict(repo))
            for repo_id, repo in (repos or {}).items()
        }
        self.tokens = set(tokens)  # accepted bearer tokens; empty: any token reads, none writes
        # token -> the namespaces (users, organisations) it may write to; None: any
        self.namespaces = {token: set(names) for token, names in namespaces.items()} if namespaces else None
        self.lfs: dict[str, bytes] = {}  # sha256 -> bytes uploaded through the LFS batch API
        self.lfs_threshold = 10 << 20
        self.commits: list[tuple[str, str, list[tuple[str, str]]]] = []  # (repo, revision, [(kind, path)])
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self._lock = threading.Lock()
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

        def do_POST(self) -> None:
            body = self._body()
            path = urlsplit(self.path).path
            hub.requests.append(("POST", unquote(path)))
            if not self._authorized(write=True):
                return
            parts = [unquote(p) for p in path.strip("/").split("/")]
            with hub._lock:
                if parts == ["api", "repos", "create"]:
                    self._create_repo(json.loads(body))
                elif parts == ["api", "validate-yaml"]:
                    self._json({"errors": [], "warnings": []}, True)
                elif parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "branch":
                    self._create_branch(f"{parts[2]}/{parts[3]}", parts[5])
                elif parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "preupload":
                    self._preupload(f"{parts[2]}/{parts[3]}", parts[5], json.loads(body))
                elif parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "commit":
                    self._commit(f"{parts[2]}/{parts[3]}", parts[5], body)
                elif len(parts) == 6 and parts[1].endswith(".git") and parts[2:] == ["info", "lfs", "objects", "batch"]:
                    self._lfs_batch(f"{parts[0]}/{parts[1][: -len('.git')]}", json.loads(body))
                else:
                    self._error(404, "EntryNotFound", "Unknown endpoint", True)

        def do_PUT(self) -> None:
            body = self._body()
            path = urlsplit(self.path).path
            hub.requests.append(("PUT", unquote(path)))
            parts = path.strip("/").split("/")
            if len(parts) != 2 or parts[0] != "lfs":
                self._error(404, "EntryNotFound", "Unknown endpoint", True)
            elif hashlib.sha256(body).hexdigest() != parts[1]:
                self._error(400, "BadRequest", "The uploaded bytes do not match their sha256", True)
            else:
                with hub._lock:
                    hub.lfs[parts[1]] = body
                self._json({}, True)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    chunk = self.rfile.read(size)
                    self.rfile.readline()  # the CRLF after each chunk
                    if size == 0:
                        return b"".join(chunks)
                    chunks.append(chunk)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        # -- routing -------------------------------------------------------

        def _dispatch(self, send_body: bool) -> None:
            path = urlsplit(self.path).path
            hub.requests.append((self.command, unquote(path)))
            if not self._authorized(write=False, send_body=send_body):
                return
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                self._api(f"{parts[2]}/{parts[3]}", parts[4:], send_body)
            elif len(parts) >= 5 and parts[2] == "resolve":
                revision = unquote(parts[3])
                self._resolve(f"{parts[0]}/{parts[1]}", revision, unquote("/".join(parts[4:])), send_body)
            else:
                self._error(404, "RepoNotFound", "Not found", send_body)

        def _token(self) -> str | None:
            value = self.headers.get("Authorization", "")
            return value[len("Bearer ") :] if value.startswith("Bearer ") else None

        def _authorized(self, *, write: bool, send_body: bool = True) -> bool:
            token = self._token()
            if (token is not None and hub.tokens and token not in hub.tokens) or (write and token is None):
                self._error(401, None, "Invalid credentials in Authorization header", send_body)
                return False
            return True

        def _may_write(self, repo_id: str) -> bool:
            """Whether the request's token may write to ``repo_id``'s namespace; a 403 when it may not."""
            allowed = None if hub.namespaces is None else hub.namespaces.get(self._token() or "", set())
            if allowed is None or repo_id.split("/")[0] in allowed:
                return True
            self._error(403, None, f"You don't have the rights to write to {repo_id}", True)
            return False

        def _repo(self, repo_id: str, send_body: bool) -> FakeRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None or (repo.private and self._token() is None):
                self._error(404, "RepoNotFound", "Repository not found", send_body)
                return None
            elif repo.gated and "authorization" not in {k.lower() for k in self.headers}:
                self._error(401, "GatedRepo", "Access to this model is restricted", send_body)
                return None
            return repo

        def _api(self, repo_id: str, rest: list[str], send_body: bool) -> None:
            repo = self._repo(repo_id, send_body)
            if repo is None:
                return
            if not rest or rest[0] == "revision":
                found = repo.snapshot(unquote(rest[1]) if len(rest) > 1 else "main")
                if found is None:
                    self._error(404, "RevisionNotFound", "Invalid rev id", send_body)
                    return
                commit, files = found
                siblings = [{"rfilename": name} for name in sorted(files)]
                self._json({"id": repo_id, "sha": commit, "private": repo.private, "siblings": siblings}, send_body)
            elif rest[0] == "tree" and len(rest) >= 2:
                found = repo.snapshot(unquote(rest[1]))
                if found is None:
                    self._error(404, "RevisionNotFound", "Invalid rev id", send_body)
                    return
                prefix = unquote("/".join(rest[2:]))
                entries = [
                    {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                    for name, data in sorted(found[1].items())
                    if not prefix or name.startswith(prefix.rstrip("/") + "/")
                ]
                self._json(entries, send_body)
            else:
                self._error(404, "EntryNotFound", "Unknown endpoint", send_body)

        def _resolve(self, repo_id: str, revision: str, filename: str, send_body: bool) -> None:
            repo = self._repo(repo_id, send_body)
            if repo is None:
                return
            found = repo.snapshot(revision)
            if found is None:
                self._error(404, "RevisionNotFound", "Invalid rev id", send_body)
                return
            commit, files = found
            data = files.get(filename)
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

        # -- uploads (called under hub._lock) --------------------------------

        def _create_repo(self, payload: dict) -> None:
            repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
            if not self._may_write(repo_id):
                return
            if repo_id in hub.repos:
                url = f"{hub.url}/{repo_id}"  # the Hub answers the existing repo's url with the 409
                self._error(409, None, "You already created this model repo", True, url=url)
                return
            private = bool(payload.get("private")) or payload.get("visibility") == "private"  # < 2.0, >= 2.0
            hub.repos[repo_id] = FakeRepo({}, private=private)
            self._json({"url": f"{hub.url}/{repo_id}", "name": repo_id}, True)

        def _create_branch(self, repo_id: str, branch: str) -> None:
            if not self._may_write(repo_id):
                return
            repo = self._repo(repo_id, True)
            if repo is None:
                return
            if repo.snapshot(branch) is not None:
                self._error(409, None, "Reference already exists", True)
                return
            repo.heads[branch] = dict(repo.files)
            self._json({}, True)

        def _preupload(self, repo_id: str, revision: str, payload: dict) -> None:
            if not self._may_write(repo_id):
                return
            if self._repo(repo_id, True) is None:
                return
            files = []
            for entry in payload["files"]:
                binary = b"\0" in base64.b64decode(entry["sample"])
                lfs = binary or entry["path"].endswith(_LFS_SUFFIXES) or entry["size"] >= hub.lfs_threshold
                mode = "lfs" if lfs else "regular"
                files.append({"path": entry["path"], "uploadMode": mode, "shouldIgnore": False})
            self._json({"files": files, "commitOid": None}, True)

        def _lfs_batch(self, repo_id: str, payload: dict) -> None:
            if not self._may_write(repo_id):
                return
            if self._repo(repo_id, True) is None:
                return
            objects = []
            for item in payload["objects"]:
                answer = {"oid": item["oid"], "size": item["size"], "authenticated": True}
                if item["oid"] not in hub.lfs:
                    answer["actions"] = {"upload": {"href": f"{hub.url}/lfs/{item['oid']}", "header": {}}}
                objects.append(answer)
            self._json({"transfer": "basic", "objects": objects}, True)

        def _commit(self, repo_id: str, revision: str, body: bytes) -> None:
            if not self._may_write(repo_id):
                return
            repo = self._repo(repo_id, True)
            if repo is None:
                return
            if revision == "main" or revision in repo.heads:
                files = repo.files if revision == "main" else repo.heads[revision]
            else:
                self._error(404, "RevisionNotFound", "Invalid rev id", True)
                return
            changed: dict[str, bytes] = {}
            done: list[tuple[str, str]] = []
            for line in body.splitlines():
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if key == "file":
                    changed[value["path"]] = base64.b64decode(value["content"])
                elif key == "lfsFile":
                    data = hub.lfs.get(value["oid"])
                    if data is None or len(data) != value["size"]:
                        self._error(422, None, f"LFS object {value['oid']} of {value['path']} was not uploaded", True)
                        return
                    changed[value["path"]] = data
                elif key != "header":
                    self._error(400, None, f"Unsupported commit operation {key}", True)
                    return
                if key != "header":
                    done.append((key, value["path"]))
            files.update(changed)
            hub.commits.append((repo_id, revision, done))
            commit = _commit_of(files)
            self._json({"commitUrl": f"{hub.url}/{repo_id}/commit/{commit}", "commitOid": commit}, True)

        # -- responses -----------------------------------------------------

        def _json(self, payload: object, send_body: bool) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def _error(self, status: int, code: str | None, message: str, send_body: bool, **fields: str) -> None:
            body = json.dumps({"error": message, **fields}).encode()
            self.send_response(status)
            if code is not None:
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
