"""Errors name their fix the way the caller meets it: a builder method in Python, a flag on the CLI, an option of the server."""

from __future__ import annotations

import pickle
import re

import pytest

from inference4py.errors import FIXES, ConfigurationError, Inference4pyError, ModelFilesMissingError


def test_a_fix_is_said_for_each_edge():
    exc = ConfigurationError("Chat messages need a chat template.", fix="chat_template")
    assert str(exc) == f"Chat messages need a chat template. {FIXES['chat_template'].python}"
    assert ".chat_template(" in str(exc)
    assert exc.message_for("cli").endswith(
        "--chat-template-file FILE (a Jinja template), or send the prompt as it "
        "is (without --chat-template and --system)."
    )
    assert "--chat-template NAME=FILE" in exc.message_for("server") and "builder" not in exc.message_for("server")
    assert isinstance(exc, ValueError)


def test_without_a_fix_the_message_is_the_same_everywhere():
    exc = ModelFilesMissingError("no model.onnx", ["model.onnx"])
    assert str(exc) == exc.message_for("cli") == exc.message_for("server") == "no model.onnx"
    assert exc.missing == ["model.onnx"]
    copy = pickle.loads(pickle.dumps(ConfigurationError("x", fix="pooling")))  # pickled (Ray): still a message
    assert str(copy).startswith("x")


def test_an_unknown_fix_is_a_bug_caught_where_it_is_raised():
    with pytest.raises(KeyError, match="FIXES"):
        Inference4pyError("x", fix="nothing-like-it")


@pytest.mark.parametrize("name", sorted(FIXES))
def test_no_cli_or_server_fix_names_a_python_method(name):
    for text in (FIXES[name].cli, FIXES[name].server):
        assert "builder" not in text and re.search(r"\w\(", text) is None, text  # no name(...) call
    assert re.search(r"\w\(", FIXES[name].python)  # the Python one does
