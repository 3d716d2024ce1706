"""The chat page shows more than text, in headless Chromium: streamed tool calls, their results, and reasoning.

Tool calls come from the real server (a random-weight Qwen2 with Qwen2.5's template, its context
lengthened for the tool prompt, paced at 30 ms a token) and are compared with the library's. Reasoning
comes from a stubbed ``fetch`` that streams ``reasoning_content`` deltas as a reasoning model's
server does, so that the page's rendering is checked whatever the fixture writes.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("selenium")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import create_app  # noqa: E402
from tests.conftest import long_context_copy  # noqa: E402
from tests.serve.support import running  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
NAME = "qwen2"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
ASK = "What is the weather in Paris?"

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs the chromium and chromedriver binaries (.ci/run installs them: apt-get install chromium chromium-driver)",
)


def _paced(ids: Any, scores: Any) -> Any:
    time.sleep(0.03)
    return scores


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return long_context_copy(tmp_path_factory.mktemp("page-tools"))


@pytest.fixture(scope="module")
def library(folder) -> OnnxTextGenerator:
    return OnnxTextGenerator.builder().model_path(folder).build()


@pytest.fixture(scope="module")
def server(folder) -> Iterator[str]:
    model = OnnxTextGenerator.builder().model_path(folder).logits_processor(_paced).build()
    with running(create_app({NAME: model})) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


@pytest.fixture
def page(server: str, browser: webdriver.Chrome) -> webdriver.Chrome:
    browser.get(f"{server}/")
    browser.execute_script("localStorage.clear()")
    browser.refresh()
    WebDriverWait(browser, 10).until(lambda d: Select(d.find_element(By.ID, "model")).options)
    return browser


def _set(driver: webdriver.Chrome, element_id: str, value: str) -> None:
    element = driver.find_element(By.ID, element_id)
    element.clear()
    element.send_keys(value)


def _send(driver: webdriver.Chrome, text: str) -> None:
    box = driver.find_element(By.ID, "message")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def _idle(driver: webdriver.Chrome) -> None:
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.state") == "idle")


def _shown(driver: webdriver.Chrome, n: int, selector: str) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)", f"#answer-{n} {selector}"
    )


def _use_tools(driver: webdriver.Chrome, choice: str) -> None:
    # set as a paste would (send_keys types a long JSON slowly)
    driver.execute_script("document.getElementById('tools').value = arguments[0]", json.dumps(TOOLS))
    Select(driver.find_element(By.ID, "tool-choice")).select_by_value(choice)
    _set(driver, "temperature", "0")
    _set(driver, "max-tokens", "60")


def test_a_tool_call_streams_into_the_answer_and_its_result_is_the_next_message(
    page: webdriver.Chrome, library: OnnxTextGenerator
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": ASK}]
    want = library.generate(messages, tools=TOOLS, tool_choice="required", max_new_tokens=60, do_sample=False)
    assert len(want.tool_calls) == 1
    call = want.tool_calls[0]

    _use_tools(page, "required")
    page.execute_script(  # every state of the call's arguments, as the page shows them
        """window.seen = [];
        new MutationObserver(() => {
          const a = document.querySelector('#answer-1 .call-args');
          if (a) window.seen.push(a.textContent);
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});"""
    )
    _send(page, ASK)
    _idle(page)
    assert not page.find_element(By.ID, "error").is_displayed()
    assert _shown(page, 1, ".call-name") == [call.name]
    [arguments] = _shown(page, 1, ".call-args")
    assert json.loads(arguments) == call.arguments
    assert _shown(page, 1, ".text") == [""]  # the call's turn has no text
    finish = {"eos": "stop", "stop": "stop"}.get(want.finish_reason, want.finish_reason)
    assert page.find_element(By.ID, "answer-1").get_attribute("data-finish") == finish
    states = [s for s in dict.fromkeys(page.execute_script("return window.seen")) if s]
    assert states[-1] == arguments and len(states) >= 2, f"the arguments appeared in one step: {states!r}"
    assert all(arguments.startswith(s) for s in states)  # they grew as they streamed
    assert "tool" in page.find_element(By.ID, "status").text
    assert "get_weather" in page.find_element(By.ID, "message").get_attribute("placeholder")

    # the next message is the call's result: the conversation the library gets is the page's
    result = "Sunny, 24 C"
    history = page.execute_script(
        """const sent = [];
        const real = window.fetch;
        window.fetch = (url, init) => {
          if (String(url).includes('chat/completions')) sent.push(JSON.parse(init.body));
          return real(url, init);
        };
        window.sent = sent;"""
    )
    assert history is None
    Select(page.find_element(By.ID, "tool-choice")).select_by_value("none")
    _send(page, result)
    _idle(page)
    [body] = page.execute_script("return window.sent")
    sent = body["messages"]
    assert sent[0] == {"role": "user", "content": ASK}
    assert sent[1]["role"] == "assistant" and sent[1]["content"] is None
    assert [c["function"]["name"] for c in sent[1]["tool_calls"]] == [call.name]
    assert sent[2] == {"role": "tool", "tool_call_id": sent[1]["tool_calls"][0]["id"], "content": result}
    follow = library.generate(sent, tools=TOOLS, tool_choice="none", max_new_tokens=60, do_sample=False)
    assert _shown(page, 2, ".text") == [follow.text]
    assert page.find_element(By.ID, "message").get_attribute("placeholder").startswith("Message")


# A reasoning model's stream, as the server sends it: the role with content null, reasoning, the answer.
EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]},
    *(
        {"choices": [{"index": 0, "delta": {"reasoning_content": piece}, "finish_reason": None}]}
        for piece in ["The user ", "greets me; ", "I greet back."]
    ),
    *(
        {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in ["Hello", " there!"]
    ),
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
]

STUB = """
const events = arguments[0];
window.sent = window.sent || [];  // kept when the stub is swapped for another stream
window.fetch = async (url, init) => {
  if (!String(url).includes('chat/completions')) {
    return new Response(JSON.stringify({object: 'list', data: [{id: 'qwen2', object: 'model'}]}),
                        {headers: {'Content-Type': 'application/json'}});
  }
  window.sent.push(JSON.parse(init.body));
  const encoder = new TextEncoder();
  const body = new ReadableStream({
    async start(controller) {
      for (const event of events) {
        controller.enqueue(encoder.encode('data: ' + JSON.stringify(event) + '\\n\\n'));
        await new Promise((done) => setTimeout(done, 60));
      }
      controller.enqueue(encoder.encode('data: [DONE]\\n\\n'));
      controller.close();
    },
  });
  return new Response(body, {headers: {'Content-Type': 'text/event-stream'}});
};
"""


def test_reasoning_is_shown_apart_and_folded_when_the_answer_starts(page: webdriver.Chrome) -> None:
    page.execute_script(STUB, EVENTS)
    page.execute_script(
        """window.states = [];
        new MutationObserver(() => {
          const box = document.querySelector('#answer-1 .reasoning');
          const text = document.querySelector('#answer-1 .text');
          window.states.push([box ? box.open : null, text ? text.textContent : null]);
        }).observe(document.getElementById('messages'),
                   {subtree: true, childList: true, characterData: true, attributes: true});"""
    )
    _send(page, "Hi")
    _idle(page)
    assert not page.find_element(By.ID, "error").is_displayed()
    assert _shown(page, 1, ".reasoning .thinking") == ["The user greets me; I greet back."]
    assert _shown(page, 1, ".text") == ["Hello there!"]  # the answer holds no reasoning
    assert _shown(page, 1, ".reasoning summary") == ["Thinking"]
    states = page.execute_script("return window.states")
    assert [True, ""] in states  # open while thinking, before any answer
    assert states[-1] == [False, "Hello there!"]  # folded once the answer came
    page.find_element(By.CSS_SELECTOR, "#answer-1 .reasoning summary").click()  # and it opens again
    assert page.execute_script("return document.querySelector('#answer-1 .reasoning').open") is True

    _send(page, "And?")  # the reasoning is not sent back: the next turn carries the answer only
    _idle(page)
    sent = page.execute_script("return window.sent")
    assert sent[1]["messages"][:2] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello there!"},
    ]
    logs = page.get_log("browser")  # type: ignore[no-untyped-call]  # selenium leaves it untyped
    assert not [e for e in logs if e["level"] == "SEVERE"]


def _call_events(*calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    """A stream of parallel calls in OpenAI's pieces: each call's id and name, then its arguments in two pieces."""
    out: list[dict[str, Any]] = [EVENTS[0]]
    for i, (call_id, name, arguments) in enumerate(calls):
        start = {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        out.append({"choices": [{"index": 0, "delta": {"tool_calls": [start]}, "finish_reason": None}]})
        for piece in (arguments[:5], arguments[5:]):
            more = {"index": i, "function": {"arguments": piece}}
            out.append({"choices": [{"index": 0, "delta": {"tool_calls": [more]}, "finish_reason": None}]})
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return out


def test_parallel_calls_wait_for_every_result_before_asking_again(page: webdriver.Chrome) -> None:
    calls = [("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "get_time", '{"timezone": "CET"}')]
    page.execute_script(STUB, _call_events(*calls))
    _send(page, "Weather and time?")
    _idle(page)
    assert _shown(page, 1, ".call-name") == ["get_weather", "get_time"]
    assert _shown(page, 1, ".call-args") == ['{"city": "Paris"}', '{"timezone": "CET"}']

    _send(page, "Sunny")  # the first call's result: kept, nothing asked yet
    WebDriverWait(page, 5).until(lambda d: "get_time" in d.find_element(By.ID, "message").get_attribute("placeholder"))
    assert len(page.execute_script("return window.sent")) == 1
    page.execute_script(STUB, EVENTS)  # the answer to the results
    _send(page, "14:00")
    _idle(page)
    sent = page.execute_script("return window.sent")
    assert len(sent) == 2
    messages = sent[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_a", "call_b"]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "14:00"},
    ]
    assert _shown(page, 2, ".text") == ["Hello there!"]
    assert page.find_element(By.ID, "message").get_attribute("placeholder").startswith("Message")
