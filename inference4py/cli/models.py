"""``inference4py pull``, ``push`` and ``inspect``: download a model, upload a folder, show how a folder is run.

The library is imported inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inference4py.cli.base import EXIT_OK


def _add_pull_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="ID", help="Hugging Face repo id (org/name)")
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit (default: main)")
    parser.add_argument(
        "--variant",
        metavar="V",
        help="precision variant (fp16, quantized, q4, ...) or genai folder instead of full precision",
    )


def _run_pull(args: argparse.Namespace) -> int:
    from inference4py.hub import pull

    folder = pull(args.model, revision=args.revision, variant=args.variant)
    print(folder)
    return EXIT_OK


def _add_push_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", metavar="FOLDER", help="the model folder to upload (converted, fused, quantized...)")
    parser.add_argument("repo_id", metavar="REPO_ID", help="the Hub repo: user/name or org/name (created if missing)")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument(
        "--revision", metavar="BRANCH", help="the branch to commit to (created if missing; default main)"
    )
    parser.add_argument("--token", metavar="TOKEN", help="a write token (default: HF_TOKEN or the saved login)")
    parser.add_argument("--message", metavar="TEXT", help="the commit message")


def _run_push(args: argparse.Namespace) -> int:
    from inference4py.publish import push

    result = push(
        args.folder,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        token=args.token,
        commit_message=args.message,
    )
    print(f"pushed {len(result.files)} files to {result.repo_id}@{result.revision}: commit {result.commit}")
    print(result.url)
    return EXIT_OK


def _add_inspect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        metavar="ID_OR_PATH",
        help="a model folder, Hugging Face repo id (downloaded), .gguf file, Whisper file (faster-whisper, "
        "whisper.cpp) or pip:PACKAGE holding one; files are converted first, as generate and serve do",
    )
    parser.add_argument("--revision", metavar="R", help="branch, tag or commit of the hub repo (default: main)")
    parser.add_argument(
        "--detect",
        action="store_true",
        help="ignore inference4py.json and genai_config.json: show what detection alone finds",
    )


def _run_inspect(args: argparse.Namespace) -> int:
    import json

    from inference4py.engine.pipeline import DESCRIPTION_FILE, detect_pipeline, load_pipeline
    from inference4py.tasks.kinds import is_whisper_source

    folder = Path(args.model).expanduser()
    if not folder.is_dir() or is_whisper_source(args.model):  # a faster-whisper folder is a file to convert
        folder = _converted_or_downloaded(args.model, args.revision)
    spec = detect_pipeline(folder) if args.detect else load_pipeline(folder)
    print(json.dumps(spec.describe(), indent=2, ensure_ascii=False))
    origin = "detection (file names and graph inputs/outputs)" if spec.source == "detected" else spec.source
    print(
        f"# resolved from {origin} in {folder}; save the JSON above as {DESCRIPTION_FILE} there to edit it",
        file=sys.stderr,
    )
    print(f"# quantized weights run on {_weights_path(folder)}", file=sys.stderr)
    return EXIT_OK


def _weights_path(folder: Path) -> str:
    """Which operators hold a folder's quantized weights: the compiled ggml ones (a GGUF file's in place, or a
    Whisper file's blocks) or onnxruntime's; read from the graphs themselves."""
    from inference4py.engine.file_weights import weights_file
    from inference4py.engine.graph_io import has_op
    from inference4py.engine.kernels import kernel_library

    graphs = sorted(folder.glob("*.onnx")) + sorted(folder.glob("onnx/*.onnx"))
    if any(has_op(graph, b"GgmlMatMul") for graph in graphs):
        library = kernel_library()
        if not library.available:  # describe() would name MatMulNBits, which this folder's graphs do not use
            return (
                f"inference4py's compiled ggml operators, which are not available here ({library.reason}): this "
                "folder does not load until they are; convert the model file again for onnxruntime's own operators"
            )
        weights = weights_file(folder / "model.onnx", check=False)
        in_place = f", the weights being {weights.path} in place" if weights is not None else ""
        return f"{library.describe()}{in_place}"
    if (folder / "inference4py-gguf.json").is_file():
        return kernel_library().describe()  # MatMulNBits, and why the compiled operators are not in use
    return "onnxruntime's own operators"


def _converted_or_downloaded(source: str, revision: str | None) -> Path:
    """The folder a source runs from: a GGUF or Whisper file (or pip package) converted as its task converts it."""
    from inference4py.gguf.sources import is_gguf_source
    from inference4py.tasks.kinds import is_whisper_source

    if is_whisper_source(source):
        from inference4py import WhisperSpeechModel

        return WhisperSpeechModel.builder().model_path(source).resolve_folder()
    if is_gguf_source(source):
        from inference4py import OnnxTextGenerator

        return OnnxTextGenerator.builder().model_path(source).resolve_folder()
    from inference4py.hub import resolve_checkpoint

    return resolve_checkpoint(source, revision)
