"""``inference4py.push``: a model folder (converted, fused, quantized or exported) to a Hugging Face Hub repo.

The folder is checked to be a model this library loads, then sent as one commit with huggingface_hub
(:mod:`inference4py.hub.upload`), with a model card (README.md) that says what it is: where it came
from and that file's sha256 (as the folder's converter recorded them), the converter's version, the
files with their sha256, and how to load it back by repo id.  A folder that has its own README.md
keeps it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inference4py.errors import ModelFilesMissingError, UnsupportedModelError
from inference4py.hub import PushResult, local_model_folder, select_model_files
from inference4py.hub.upload import FileInfo, folder_files, upload_folder_commit, validate_repo_id

__all__ = ["push", "model_card"]

# The provenance each converter leaves in its folders: marker file -> what made the folder.
_MARKERS: dict[str, str] = {
    "inference4py-gguf.json": "converted from a GGUF file (`inference4py convert`)",
    "inference4py-whisper.json": "converted from a Whisper file: faster-whisper or whisper.cpp (`inference4py convert`)",
    ".inference4py-fused": "attention fused into GroupQueryAttention (`inference4py optimize`)",
}
_WEIGHTS_RECORD = "inference4py-weights.json"  # engine/file_weights.py RECORD: the weights are another file's bytes

# What loads each kind of folder (tasks/kinds.py's kinds), and its CLI command.
_LOADERS: dict[str, tuple[str, str]] = {
    "decoder": ("OnnxTextGenerator", 'inference4py generate -m {repo}{rev} "Hello"'),
    "encoder-decoder": ("FlanT5TextGenerator", 'inference4py generate -m {repo}{rev} "Hello"'),
    "speech": ("WhisperSpeechModel", "inference4py transcribe -m {repo}{rev} audio.wav"),
    "embedding": ("OnnxEmbedder", 'inference4py embed -m {repo} "Hello"'),
    "reranker": ("OnnxReranker", "inference4py serve -m {repo}   # then POST /v1/rerank"),
}


def push(
    folder: str | os.PathLike[str],
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    token: str | bool | None = None,
    commit_message: str | None = None,
    endpoint: str | None = None,
) -> PushResult:
    """Upload a model folder to a Hub repo as one commit, with a model card.

    The repo is created when it does not exist (``private`` then applies), and so is the branch
    ``revision``.  Every file of the folder is sent (huggingface_hub chooses LFS or a regular upload
    per file), plus a README.md model card unless the folder has one.

    Args:
        folder: A local model folder: one ``resolve_checkpoint`` / the task builders load.
        repo_id: ``"user/name"`` or ``"org/name"``.
        private: Create the repo private (an existing repo keeps its visibility).
        revision: The branch to commit to (created from main when missing); default main.
        token: A write token; None uses ``HF_TOKEN`` or the saved login.
        commit_message: Default "Upload <folder name> with inference4py".
        endpoint: Hub URL; default ``HF_ENDPOINT`` or huggingface.co.

    Returns:
        The repo, branch, commit hash and URL, and the files sent.

    Raises:
        ModelNotFoundError: ``folder`` does not exist, or ``repo_id`` is not a valid repo id.
        ModelFilesMissingError: the folder holds no model this library can load.
        UnsupportedModelError: the folder's weights are a file outside it (a GGUF file used in
            place), which a push cannot carry.
        HubError: the token is refused or may not write there, or the Hub cannot be reached.

    Example:
        >>> push("smollm2-q4", "me/smollm2-q4-onnx", private=True)  # doctest: +SKIP
        PushResult(repo_id='me/smollm2-q4-onnx', revision='main', commit='3f2a...', ...)
    """
    path = local_model_folder(folder)
    validate_repo_id(repo_id)
    files = folder_files(path)
    _check_model_folder(path, files)
    branch = revision or "main"

    def card(infos: Mapping[str, FileInfo]) -> dict[str, bytes]:
        if "README.md" in files:
            return {}
        return {"README.md": model_card(path, repo_id, revision=branch, files=infos).encode("utf-8")}

    return upload_folder_commit(
        path,
        repo_id,
        extra_files=card,
        private=private,
        revision=revision,
        token=token,
        commit_message=commit_message or f"Upload {path.name} with inference4py",
        endpoint=endpoint,
    )


def model_card(
    folder: Path, repo_id: str, *, revision: str = "main", files: Mapping[str, FileInfo] | None = None
) -> str:
    """The README.md of a pushed folder: what it is, where it came from, how to load it.

    Args:
        folder: The model folder.
        repo_id: Where it is pushed (for the loading snippet).
        revision: The branch it is pushed to.
        files: Each file's size and sha256, when known (the upload computes them).
    """
    from importlib.metadata import PackageNotFoundError, version

    from inference4py.tasks.kinds import model_kind

    try:
        __version__ = version("inference4py")
    except PackageNotFoundError:  # run from a source tree that was never installed
        __version__ = "unknown"

    kind = model_kind(str(folder)).kind
    task, command = _LOADERS.get(kind, _LOADERS["decoder"])
    model_type = _read_json(folder / "config.json").get("model_type", "")
    rev_py = f'.revision("{revision}")' if revision != "main" else ""
    rev_cli = f" --revision {revision}" if revision != "main" else ""  # for the commands that take one
    lines = [
        "---",
        "library_name: inference4py",
        "tags:",
        "- onnx",
        "- inference4py",
        "---",
        "",
        f"# {repo_id.split('/')[-1]}",
        "",
        f"An ONNX model folder for inference4py ({kind}"
        + (f", `{model_type}`" if model_type else "")
        + f"), pushed with inference4py {__version__}.",
        "",
        "## Where it comes from",
        "",
    ]
    provenance = [(marker, what, _read_json(folder / marker)) for marker, what in _MARKERS.items()]
    provenance = [entry for entry in provenance if (folder / entry[0]).is_file()]
    if not provenance:
        lines.append("The folder records no conversion: it was exported, quantized or written by hand.")
    for marker, what, recorded in provenance:
        lines.append(f"- {what}, as `{marker}` records it:")
        for label, key in _PROVENANCE_FIELDS:
            if recorded.get(key) is not None:
                lines.append(f"  - {label}: `{recorded[key]}`")
    lines += [
        "",
        "## Load it",
        "",
        "```python",
        f"from inference4py import {task}",
        "",
        f'model = {task}.builder().model_id("{repo_id}"){rev_py}.build()',
        "```",
        "",
        "or from the command line:",
        "",
        "```bash",
        command.format(repo=repo_id, rev=rev_cli),
        "```",
        "",
        "A private repo needs a token: `.token(...)` or `HF_TOKEN`.",
    ]
    if files:
        lines += ["", "## Files", "", "| file | bytes | sha256 |", "|---|---:|---|"]
        lines += [f"| `{name}` | {info.size} | `{info.sha256}` |" for name, info in sorted(files.items())]
    return "\n".join(lines) + "\n"


_PROVENANCE_FIELDS = (
    ("source", "source"),
    ("source digest (sha256)", "sha256"),
    ("source digest (sha256)", "source_sha256"),
    ("source format", "format"),
    ("architecture", "architecture"),
    ("name", "name"),
    ("weights width (bits; none: as the file stores them)", "bits"),
    ("operators (inference4py ggml: loads only where inference4py's compiled operators are built)", "operators"),
    ("converter version", "converter"),
    ("fusion version", "fusion_version"),
    ("fusion level", "level"),
)


def _check_model_folder(folder: Path, files: list[str]) -> None:
    try:
        select_model_files(files)
    except ModelFilesMissingError as exc:
        raise ModelFilesMissingError(
            f"'{folder}' is not a model folder inference4py loads, so it is not pushed: {exc}"
        ) from exc
    if any(name.endswith(_WEIGHTS_RECORD) for name in files):
        recorded = _read_json(folder / _WEIGHTS_RECORD).get("file", "another file")
        raise UnsupportedModelError(
            f"'{folder}' runs on the weights of {recorded} in place (a GGUF conversion on the compiled operators), "
            "which a push cannot carry. Convert it again with INFERENCE4PY_GGML_OPS=0 (the stored blocks as "
            "MatMulNBits, same numbers) or with --bits, for a folder that holds its weights."
        )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}
