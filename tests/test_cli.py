"""inference4py.cli: parsing, lazy imports, error handling, pull, and the generate/chat plumbing.

generate/chat run here against a stand-in task class (the CLI's contract with
OnnxTextGenerator: builder methods, generate(prompt, on_token=...), context
manager); end-to-end runs on the tiny fixture models belong with the task tests.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import inference4py
from inference4py.cli import COMMANDS, main
from inference4py.errors import ConfigurationError, ModelNotFoundError
from tests.conftest import FIXTURES
from tests.hubserver import populate_cache

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAVY_MODULES = ("onnxruntime", "numpy", "huggingface_hub", "tokenizers", "inference4py.engine")


def _run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120
    )


# --------------------------------------------------------------------------- help and lazy imports


@pytest.mark.parametrize("argv", [["--help"], *[[name, "--help"] for name in COMMANDS]])
def test_help_imports_no_heavy_module(argv):
    script = (
        "import json, sys\n"
        "from inference4py.cli import main\n"
        f"code = main({argv!r})\n"
        f"heavy = [m for m in {HEAVY_MODULES!r} if any(k == m or k.startswith(m + '.') for k in sys.modules)]\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    result = _run("-c", script)
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}
    assert "usage: inference4py" in result.stdout


def test_python_dash_m_lists_the_commands():
    result = _run("-m", "inference4py", "--help")
    assert result.returncode == 0
    for name in ("generate", "chat", "pull"):
        assert name in result.stdout


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "usage:" in capsys.readouterr().err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert inference4py.__version__ in capsys.readouterr().out


# --------------------------------------------------------------------------- pull


def _cache() -> Path:
    return Path(os.environ["HF_HUB_CACHE"])


def test_pull_offline_with_populated_cache_prints_the_path(capsys):
    snapshot = populate_cache(_cache(), "org/name", {"config.json": b"{}", "model.onnx": b"graph"})
    assert main(["pull", "org/name"]) == 0
    assert capsys.readouterr().out.strip() == str(snapshot)


def test_pull_offline_missing_model_is_a_clean_error(capsys):
    assert main(["pull", "org/absent", "--revision", "v2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: Model 'org/absent' (revision 'v2') is not in the local Hugging Face cache")
    assert "inference4py pull org/absent --revision v2" in captured.err
    assert "Traceback" not in captured.err


def test_pull_invalid_id_is_a_clean_error_in_a_subprocess():
    result = _run("-m", "inference4py", "pull", "not a repo id")
    assert result.returncode == 2
    assert result.stderr.startswith("error: 'not a repo id' is neither an existing folder nor a valid")
    assert "Traceback" not in result.stderr


def test_pull_variant_is_passed_on(capsys):
    populate_cache(_cache(), "org/tjs", {"config.json": b"{}", "onnx/model.onnx": b"x"})
    assert main(["pull", "org/tjs", "--variant", "fp16"]) == 2
    assert "--variant fp16" in capsys.readouterr().err


# --------------------------------------------------------------------------- generate / chat plumbing


class FakeGenerator:
    """Records prompts and streams a scripted reply through on_token."""

    def __init__(self, log: dict, reply: list[str]) -> None:
        self.log = log
        self.reply = reply

    def generate(self, prompt, on_token=None, *, options=None):
        if options is not None:
            self.log.setdefault("options", []).append(options)
        self.log["prompts"].append(prompt)
        for piece in self.reply:
            if piece is KeyboardInterrupt:
                raise KeyboardInterrupt
            if on_token is not None:
                on_token(piece)
        return object()

    def chat_session(self):
        return FakeSession(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.log["closed"] = True


class FakeSession:
    """Like ChatSession: keeps the history, sends the whole conversation each turn."""

    def __init__(self, generator: FakeGenerator) -> None:
        self.generator = generator
        self.messages: list[dict] = []

    def send(self, text, on_token=None):
        self.messages.append({"role": "user", "content": text})
        pieces: list[str] = []
        self.generator.generate(list(self.messages), on_token=lambda p: (pieces.append(p), on_token and on_token(p)))
        self.messages.append({"role": "assistant", "content": "".join(pieces)})


class FakeBuilder:
    """Records every builder call (name, args) and returns itself, like the real builder."""

    def __init__(self, log: dict, reply: list[str], fail: Exception | None) -> None:
        self.log, self.reply, self.fail = log, reply, fail

    def __getattr__(self, name):
        def record(*args):
            self.log["calls"].append((name, *args))
            return self

        return record

    def build(self):
        if self.fail is not None:
            raise self.fail
        return FakeGenerator(self.log, self.reply)


@pytest.fixture
def fake_task(monkeypatch):
    """Replace inference4py.OnnxTextGenerator; returns the call log and a setter for the reply."""
    log: dict = {"calls": [], "prompts": [], "closed": False}
    state = {"reply": ["Hello", ", wor", "ld"], "fail": None}

    class FakeTask:
        @staticmethod
        def builder():
            return FakeBuilder(log, state["reply"], state["fail"])

    monkeypatch.setattr(inference4py, "OnnxTextGenerator", FakeTask, raising=False)
    log["state"] = state
    return log


def test_generate_streams_the_pieces_and_maps_every_option(fake_task, capsys):
    code = main(
        [
            "generate",
            "--model",
            "org/name",
            "--revision",
            "v1",
            "--max-new-tokens",
            "12",
            "--temperature",
            "0.7",
            "--top-k",
            "40",
            "--top-p",
            "0.9",
            "--min-p",
            "0.05",
            "--repetition-penalty",
            "1.1",
            "--seed",
            "7",
            "--stop",
            "END",
            "--stop",
            "\n\n",
            "Once upon a time",
        ]
    )
    assert code == 0
    assert capsys.readouterr().out == "Hello, world\n"
    assert fake_task["calls"] == [
        ("model_id", "org/name"),
        ("revision", "v1"),
        ("max_new_tokens", 12),
        ("temperature", 0.7),
        ("top_k", 40),
        ("top_p", 0.9),
        ("min_p", 0.05),
        ("repetition_penalty", 1.1),
        ("seed", 7),
        ("stop_sequence", "END"),
        ("stop_sequence", "\n\n"),
    ]
    assert fake_task["prompts"] == ["Once upon a time"]
    assert fake_task["closed"]


def test_generate_uses_model_path_for_an_existing_folder(fake_task, tmp_path, capsys):
    assert main(["generate", "-m", str(tmp_path), "--greedy", "--temperature", "0.5", "hi"]) == 0
    assert fake_task["calls"][0] == ("model_path", tmp_path)
    assert fake_task["calls"][-1] == ("greedy",)  # last, so it wins over sampling options


def test_generate_with_system_prompt_sends_a_user_message(fake_task, capsys):
    assert main(["generate", "-m", "org/name", "--system", "Be brief.", "Hi"]) == 0
    assert ("system_prompt", "Be brief.") in fake_task["calls"]
    assert fake_task["prompts"] == [[{"role": "user", "content": "Hi"}]]


def test_generate_reads_the_prompt_from_stdin(fake_task, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("from stdin\n"))
    assert main(["generate", "-m", "org/name", "--chat-template"]) == 0
    assert fake_task["prompts"] == ["from stdin\n"]
    assert ("chat_template",) in fake_task["calls"]


def test_generate_empty_prompt_is_a_clean_error(fake_task, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["generate", "-m", "org/name"]) == 2
    assert capsys.readouterr().err.startswith("error: The prompt is empty")


@pytest.mark.parametrize(
    "error", [ModelNotFoundError("Model folder './x' does not exist."), ConfigurationError("temperature must be >= 0")]
)
def test_library_errors_become_exit_2_without_traceback(fake_task, capsys, error):
    fake_task["state"]["fail"] = error
    assert main(["generate", "-m", "org/name", "hi"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {error}\n"


def test_argument_errors_exit_2(capsys):
    assert main(["generate", "--max-new-tokens", "many", "-m", "x", "hi"]) == 2
    assert "invalid int value" in capsys.readouterr().err
    assert main(["generate", "hi"]) == 2  # --model is required


def test_ctrl_c_exits_130(fake_task, capsys):
    fake_task["state"]["reply"][:] = ["partial", KeyboardInterrupt]
    assert main(["generate", "-m", "org/name", "hi"]) == 130
    assert capsys.readouterr().out == "partial"
    assert fake_task["closed"]


def test_chat_keeps_the_history_until_exit(fake_task, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hi\n\nAnd again?\n/exit\nnever read\n"))
    assert main(["chat", "-m", "org/name", "--system", "You are terse."]) == 0
    first, second = fake_task["prompts"]
    assert first == [{"role": "user", "content": "Hi"}]
    assert second == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello, world"},
        {"role": "user", "content": "And again?"},
    ]
    assert ("system_prompt", "You are terse.") in fake_task["calls"]
    assert capsys.readouterr().out == "Hello, world\nHello, world\n"


def test_chat_ends_at_eof_and_reset_clears_history(fake_task, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\n/reset\ntwo"))
    assert main(["chat", "-m", "org/name"]) == 0
    assert fake_task["prompts"][-1] == [{"role": "user", "content": "two"}]
    assert fake_task["closed"]


def test_generate_prints_logprobs_and_takes_openai_penalties(capsys):
    from inference4py import OnnxTextGenerator

    folder = FIXTURES / "models" / "qwen2"
    args = ["generate", "--model", str(folder), "--max-new-tokens", "4", "--presence-penalty", "0.5"]
    assert main([*args, "--logprobs", "2", "Hello"]) == 0
    captured = capsys.readouterr()
    rows = [line.split("\t") for line in captured.err.strip().splitlines()]
    with OnnxTextGenerator.builder().model_path(folder).build() as gen:
        want = gen.generate("Hello", max_new_tokens=4, presence_penalty=0.5, logprobs=True, top_logprobs=2)
    assert [int(r[0]) for r in rows] == list(want.token_ids)
    assert [float(r[2]) for r in rows] == pytest.approx([t.logprob for t in want.logprobs], abs=1e-4)
    assert captured.out.strip() == want.text.strip()


def test_generate_rejects_too_many_top_logprobs(capsys):
    assert main(["generate", "--model", str(FIXTURES / "models" / "qwen2"), "--logprobs", "30", "Hi"]) != 0
    assert "top_logprobs" in capsys.readouterr().err


def test_generate_constrains_to_a_json_schema_file_and_a_regex(tmp_path, capsys):
    pytest.importorskip("llguidance")
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"],
        "additionalProperties": False,
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    folder = str(FIXTURES / "models" / "qwen2")
    assert (
        main(["generate", "--model", folder, "--max-new-tokens", "20", "--json-schema", str(tmp_path / "s.json"), "Hi"])
        == 0
    )
    value = json.loads(capsys.readouterr().out)
    assert isinstance(value["n"], int) and value["n"] <= 9
    assert main(["generate", "--model", folder, "--max-new-tokens", "12", "--regex", "[0-9]{3}-[a-z]{2}", "Hi"]) == 0
    assert __import__("re").fullmatch("[0-9]{3}-[a-z]{2}", capsys.readouterr().out.strip())
    assert main(["generate", "--model", folder, "--regex", "(bad", "Hi"]) == 2
    assert "regular expression" in capsys.readouterr().err


def test_a_constrained_output_cut_by_the_token_budget_is_an_error(tmp_path, capsys):
    """The text is printed as it came, then the exit status and stderr say it is cut off (issue 32)."""
    pytest.importorskip("llguidance")
    folder = str(FIXTURES / "models" / "qwen2")
    assert main(["generate", "--model", folder, "--max-new-tokens", "3", "--regex", "[a-z]{60}", "Hi"]) == 2
    captured = capsys.readouterr()
    assert "before the regex was complete" in captured.err and "Raise --max-new-tokens" in captured.err
    assert captured.out.strip() and __import__("re").fullmatch("[a-z]+", captured.out.strip())
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 80}}, "required": ["s"]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    args = ["generate", "--model", folder, "--max-new-tokens", "4", "--json-schema", str(tmp_path / "s.json"), "Hi"]
    assert main(args) == 2
    assert "before the JSON schema was complete" in capsys.readouterr().err
