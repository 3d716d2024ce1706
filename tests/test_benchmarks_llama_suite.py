"""benchmarks/llama_server_suite.py: llama-server's flags as inference4py serve's."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.llama_server_suite import serve_command


def test_llama_server_flags_become_serve_flags():
    argv = [
        "--port",
        "8085",
        "--temp",
        "0.8",
        "--seed",
        "42",
        "--host",
        "127.0.0.1",
        "--offline",
        "--hf-repo",
        "ggml-org/x",
        "--no-slots",
    ]
    argv += ["--alias", "tiny", "--api-key", "sk-1", "--jinja", "--chat-template-file", "t.jinja", "--n-predict", "64"]
    command = serve_command([*argv, "--cors-origins", "localhost,https://app.example"], Path("/m"))
    assert command[:4] == [sys.executable, "-m", "inference4py", "serve"]
    flags = command[4:]
    pairs = dict(zip(flags[::2], flags[1::2]))
    assert pairs["--model"] == "/m" and pairs["--served-model-name"] == "tiny" and pairs["--port"] == "8085"
    assert pairs["--api-key"] == "sk-1" and pairs["--chat-template"] == "tiny=t.jinja"
    assert flags.count("--cors-origin") == 1 and pairs["--cors-origin"] == "https://app.example"  # localhost: default
    assert "64" not in flags and "--hf-repo" not in flags  # llama.cpp's model and generation flags are left out
