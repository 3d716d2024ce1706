"""llama.cpp's own server tests (``tools/server/tests/unit``) against ``inference4py serve``.

Their harness starts ``$LLAMA_SERVER_BIN_PATH`` with llama-server's flags and talks to it over HTTP.
This script points that variable at a shim that turns those flags into ``inference4py serve``'s and
serves a fixture model instead of llama.cpp's (the tests chosen here do not depend on the model's
text), then runs pytest in llama.cpp's test folder. Nothing of llama.cpp is copied here: get it from
the llama-cpp-python sdist, which vendors llama.cpp::

    pip download --no-deps --no-binary :all: llama-cpp-python -d /tmp/llsrc
    tar xzf /tmp/llsrc/llama_cpp_python-*.tar.gz -C /tmp/llsrc
    pip install wget filelock requests   # what the harness imports besides pytest and openai
    python benchmarks/llama_server_suite.py /tmp/llsrc/llama_cpp_python-*/vendor/llama.cpp

Flags mapped: --host, --port, --api-key, --alias (served name), --chat-template-file, and
--cors-origins (llama-server's ``localhost`` keyword is our default; other origins become
--cors-origin). The model flags are ignored: the server runs the qwen2 fixture (Qwen2.5's tool
template) with an 8,192-token context, or the template the test gives. Other flags are ignored.

The default selection (``DEFAULT_TESTS``) is test_security.py's key and CORS tests and
test_tool_call.py's tests of answers without a tool call; give pytest's ``-k`` and node ids after
``--`` to run others. Left out as llama.cpp's own extensions: the web UI's static files, the
routes without ``/v1`` (``/completions`` answering llama.cpp's ``content``, ``/chat/completions``),
the CORS proxy and local media files. Expected to fail: the four ``test_cors_options`` cases whose
origin is not local (``web.mydomain.fr``, ``origin``), run under our default, which allows pages on
this machine only (llama-server allows any origin unless ``--cors-origins`` is given).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "models" / "qwen2"
DEFAULT_TESTS = [
    "unit/test_security.py::test_access_public_endpoint",
    "unit/test_security.py::test_incorrect_api_key",
    "unit/test_security.py::test_cors_options",
    "unit/test_security.py::test_cors_origins_localhost_reflects",
    "unit/test_security.py::test_cors_origins_localhost_rejects",
    "unit/test_security.py::test_cors_origins_defaults_to_localhost_with_tools_enabled",
    "unit/test_tool_call.py::test_completion_without_tool_call_fast",
]
# llama-server flags that take a value (the shim skips the value of those it does not map)
_VALUED = {
    "--temp", "--seed", "--model", "-m", "--model-url", "--model-draft", "--hf-repo", "--hf-file", "--models-dir",
    "--models-max", "--models-preset", "--batch-size", "--ubatch-size", "--threads", "--n-gpu-layers", "--pooling",
    "--tags", "--ctx-size", "--parallel", "-ctk", "-ctv", "-fa", "--n-predict", "--slot-save-path", "--grp-attn-n",
    "--grp-attn-w", "--lora", "--spec-type", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-synth-len",
    "--spec-synth-rates", "--reasoning-format", "--reasoning", "--chat-template", "--mmproj-url", "--media-path",
    "--sleep-idle-seconds", "--cache-ram", "--tools", "--tools-runtime", "--mcp-servers-config",
    "--mcp-servers-json",
}  # fmt: skip


def serve_command(argv: list[str], model: Path) -> list[str]:
    """``inference4py serve`` arguments for llama-server's ``argv``."""
    given: dict[str, str] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in ("--host", "--port", "--api-key", "--alias", "--chat-template-file", "--cors-origins"):
            given[flag] = argv[i + 1]
            i += 2
        else:
            i += 2 if flag in _VALUED else 1
    name = given.get("--alias", "tinyllama-2")
    command = [sys.executable, "-m", "inference4py", "serve", "--model", str(model), "--served-model-name", name]
    command += ["--host", given.get("--host", "127.0.0.1"), "--port", given.get("--port", "8080")]
    command += ["--shutdown-timeout", "1", "--log-level", "warning"]
    if "--api-key" in given:
        command += ["--api-key", given["--api-key"]]
    if "--chat-template-file" in given:
        command += ["--chat-template", f"{name}={given['--chat-template-file']}"]
    for origin in given.get("--cors-origins", "").split(","):
        if origin.strip() and origin.strip() != "localhost":  # llama-server's keyword for local pages: our default
            command += ["--cors-origin", origin.strip()]
    return command


def _model(cache: Path) -> Path:
    """The qwen2 fixture with an 8,192-token context (the tool prompts are longer than its 128)."""
    folder = cache / "qwen2-8k"
    if not folder.is_dir():
        shutil.copytree(FIXTURE, folder)
        config = json.loads((folder / "config.json").read_text())
        config["max_position_embeddings"] = 8192  # the export computes its rotary angles in the graph
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def pytest_configure(config: object) -> None:
    """Loaded into llama.cpp's pytest run (``-p``): its harness keeps response headers in a plain dict.

    HTTP header names are case-insensitive; llama-server writes ``Access-Control-Allow-Origin``,
    uvicorn writes every name in lower case, and the tests look names up with llama-server's case.
    Their responses' headers become a case-insensitive mapping; nothing else of the harness changes.
    """
    import utils  # llama.cpp's tools/server/tests/utils.py (the run's working folder)
    from requests.structures import CaseInsensitiveDict

    original = utils.ServerProcess.make_request

    def make_request(self: object, *args: object, **kwargs: object) -> object:
        response = original(self, *args, **kwargs)
        response.headers = CaseInsensitiveDict(response.headers)
        return response

    utils.ServerProcess.make_request = make_request


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--shim":  # started by llama.cpp's harness as llama-server
        command = serve_command(sys.argv[3:], Path(sys.argv[2]))
        os.execv(command[0], command)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("llama_cpp", type=Path, help="llama.cpp's source folder (vendor/llama.cpp of the sdist)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest arguments instead of DEFAULT_TESTS")
    args = parser.parse_args()
    tests = args.llama_cpp / "tools" / "server" / "tests"
    if not (tests / "unit").is_dir():
        parser.error(f"{tests}/unit does not exist: give the llama.cpp folder (vendor/llama.cpp of the sdist)")
    with tempfile.TemporaryDirectory(prefix="llama-suite-") as tmp:
        shim = Path(tmp) / "llama-server"
        model = _model(Path(tmp))
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" --shim "{model}" "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
        env = {**os.environ, "LLAMA_SERVER_BIN_PATH": str(shim), "PYTHONPATH": str(ROOT)}
        plugin = ["-p", "no:cacheprovider", "-p", "benchmarks.llama_server_suite"]
        command = [sys.executable, "-m", "pytest", "-q", *plugin, *(args.pytest_args or DEFAULT_TESTS)]
        return subprocess.run(command, cwd=tests, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
