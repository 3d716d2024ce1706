"""The CLI end to end on the fixture models (in-process, through main())."""

from __future__ import annotations

import io

from inference4py.cli import main
from tests.conftest import MODELS, load_reference

REF = load_reference("decoder")["models"]
S2S = load_reference("seq2seq")["models"]


def test_generate_streams_the_greedy_reference(capsys):
    case = REF["gpt2"]["cases"][0]
    code = main(
        [
            "generate",
            "--model",
            str(MODELS / "gpt2"),
            "--greedy",
            "--max-new-tokens",
            str(case["max_new_tokens"]),
            case["prompt"],
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out == case["text"] + ("" if case["text"].endswith("\n") else "\n")


def test_generate_with_stop_string(capsys):
    case = REF["gpt2"]["cases"][0]
    stop = case["text"][8:14]
    code = main(
        [
            "generate",
            "--model",
            str(MODELS / "gpt2"),
            "--greedy",
            "--stop",
            stop,
            "--max-new-tokens",
            str(case["max_new_tokens"]),
            case["prompt"],
        ]
    )
    assert code == 0
    assert capsys.readouterr().out.rstrip("\n") == case["text"][: case["text"].index(stop)].rstrip("\n")


def test_chat_round_trip_uses_the_template(capsys, monkeypatch):
    chat = next(c for c in REF["qwen2"]["cases"] if c["name"] == "chat-single")
    monkeypatch.setattr("sys.stdin", io.StringIO(chat["messages"][0]["content"] + "\n/exit\n"))
    code = main(["chat", "--model", str(MODELS / "qwen2"), "--greedy", "--max-new-tokens", str(chat["max_new_tokens"])])
    assert code == 0
    assert chat["text"] in capsys.readouterr().out


def test_chat_without_template_is_a_clean_error_naming_the_flag(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    code = main(["chat", "--model", str(MODELS / "gpt2"), "--max-new-tokens", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and "Traceback" not in err
    assert "--chat-template-file FILE" in err and "builder" not in err and ".chat_template(" not in err


def test_generate_renders_the_prompt_with_a_template_file(capsys, tmp_path):
    from inference4py import OnnxTextGenerator

    template = "{% for m in messages %}Q: {{ m['content'] }}\nA:{% endfor %}"
    (tmp_path / "t.jinja").write_text(template, encoding="utf-8")
    args = ["generate", "-m", str(MODELS / "gpt2"), "--greedy", "--max-new-tokens", "6"]
    assert main([*args, "--chat-template-file", str(tmp_path / "t.jinja"), "Hello"]) == 0
    want = OnnxTextGenerator.builder().model_path(MODELS / "gpt2").chat_template(template).build()
    expected = want.generate("Hello", max_new_tokens=6, do_sample=False).text
    plain = OnnxTextGenerator.builder().model_path(MODELS / "gpt2").build()
    assert expected != plain.generate("Hello", max_new_tokens=6, do_sample=False).text  # the template counts
    assert capsys.readouterr().out.rstrip("\n") == expected.rstrip("\n")
    assert main([*args, "--chat-template-file", str(tmp_path / "missing.jinja"), "Hello"]) == 2
    assert "--chat-template-file: cannot read" in capsys.readouterr().err


def test_summarize_and_translate(capsys):
    case = S2S["bart"]["cases"][1]
    assert (
        main(
            [
                "summarize",
                "--model",
                str(MODELS / "bart"),
                "--max-new-tokens",
                str(case["max_new_tokens"]),
                case["input"],
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.rstrip("\n") == case["text"].rstrip("\n")
    case = S2S["marian"]["cases"][1]
    assert (
        main(
            [
                "translate",
                "--model",
                str(MODELS / "marian"),
                "--max-new-tokens",
                str(case["max_new_tokens"]),
                case["input"],
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.rstrip("\n") == case["text"].rstrip("\n")


def test_bad_values_are_clean_errors(capsys):
    code = main(["generate", "--model", str(MODELS / "gpt2"), "--temperature", "-1", "hi"])
    err = capsys.readouterr().err
    assert code == 2 and "temperature" in err and "Traceback" not in err
    code = main(["generate", "--model", str(MODELS / "t5"), "hi"])
    assert code == 2 and "encoder-decoder" in capsys.readouterr().err
