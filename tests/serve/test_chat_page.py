"""The chat page at ``/``, driven in headless Chromium against the real server (uvicorn on a free port).

Every answer the page shows is compared with what the library gives for the same messages, called
directly. The served model runs a logits processor that only sleeps (30 ms a token, the scores are
unchanged) so that streaming and stopping can be watched without racing a tiny, very fast model.
"""

from __future__ import annotations

import shutil
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("selenium")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import create_app, served_name  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402
from tests.serve.support import metrics, running  # noqa: E402

QWEN = FIXTURES / "models" / "qwen2"
NAME = served_name(str(QWEN))  # "qwen2", as `inference4py serve --model` names it
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
PACE = 0.03  # seconds a token
Server = tuple[str, list[bytes | None]]  # its address, the Authorization header of each /v1 request

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs the chromium and chromedriver binaries (.ci/run installs them: apt-get install chromium chromium-driver)",
)


def _paced(ids: Any, scores: Any) -> Any:
    time.sleep(PACE)
    return scores


@pytest.fixture(scope="module")
def library() -> OnnxTextGenerator:
    return OnnxTextGenerator.builder().model_path(QWEN).build()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The server's address and the Authorization header of every /v1 request it received."""
    model = OnnxTextGenerator.builder().model_path(QWEN).logits_processor(_paced).build()
    app = create_app({NAME: model})
    authorizations: list[bytes | None] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:  # plain ASGI: disconnects pass untouched
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            authorizations.append(dict(scope["headers"]).get(b"authorization"))
        await app(scope, receive, send)

    with running(recording) as url:
        yield url, authorizations


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
def page(server: Server, browser: webdriver.Chrome) -> webdriver.Chrome:
    """A fresh page: no conversation, nothing in localStorage, the model list loaded."""
    browser.get(f"{server[0]}/")
    browser.execute_script("localStorage.clear()")
    browser.refresh()
    WebDriverWait(browser, 10).until(lambda d: Select(d.find_element(By.ID, "model")).options)
    return browser


def _set(driver: webdriver.Chrome, element_id: str, value: str) -> None:
    element = driver.find_element(By.ID, element_id)
    element.clear()
    element.send_keys(value)


def _send(driver: webdriver.Chrome, text: str, *, max_tokens: int, system: str = "") -> None:
    """Fill the settings (temperature 0) and the message, then press Enter in the message box."""
    _set(driver, "system", system)
    _set(driver, "temperature", "0")
    _set(driver, "max-tokens", str(max_tokens))
    box = driver.find_element(By.ID, "message")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def _idle(driver: webdriver.Chrome) -> None:
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.body.dataset.state") == "idle")


def _answer(driver: webdriver.Chrome, n: int) -> str | None:
    """The n-th answer's text exactly as shown (textContent: no whitespace folding), None if absent."""
    return driver.execute_script(f"const a = document.querySelector('#answer-{n} .text'); return a && a.textContent")


def _ask(driver: webdriver.Chrome, n: int, text: str, *, max_tokens: int, system: str = "") -> str:
    _send(driver, text, max_tokens=max_tokens, system=system)
    _idle(driver)
    answer = _answer(driver, n)
    assert answer is not None, driver.find_element(By.ID, "error").text
    return answer


def test_the_page_lists_the_served_models_under_its_own_policy(server: Server, page: webdriver.Chrome) -> None:
    assert [o.text for o in Select(page.find_element(By.ID, "model")).options] == [NAME]
    with urllib.request.urlopen(f"{server[0]}/", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/html")
        policy = response.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy  # nothing is loaded from elsewhere
    logs = page.get_log("browser")  # type: ignore[no-untyped-call]  # selenium leaves it untyped
    assert not [e for e in logs if e["level"] == "SEVERE"]  # no blocked script, no failed load


def test_the_picker_leaves_out_models_that_cannot_chat(browser: webdriver.Chrome) -> None:
    from inference4py.serve import load_models

    models = load_models([str(QWEN), str(FIXTURES / "models" / "whisper")])  # Whisper only answers audio routes
    with running(create_app(models)) as url:
        browser.get(f"{url}/")
        WebDriverWait(browser, 10).until(lambda d: Select(d.find_element(By.ID, "model")).options)
        assert [o.text for o in Select(browser.find_element(By.ID, "model")).options] == [NAME]


def test_the_answer_streams_in_and_equals_the_library(page: webdriver.Chrome, library: OnnxTextGenerator) -> None:
    # every state of the first answer's text, as the page shows it
    page.execute_script(
        """window.seen = [];
        new MutationObserver(() => {
          const a = document.querySelector('#answer-1 .text');
          if (a) window.seen.push(a.textContent);
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});"""
    )
    shown = _ask(page, 1, "Hi there", max_tokens=16, system="Be brief.")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert shown == library.generate(messages, max_new_tokens=16, do_sample=False).text

    states = [s for s in dict.fromkeys(page.execute_script("return window.seen")) if s]
    partial = states[:-1]
    assert states[-1] == shown
    assert len(partial) >= 3, f"the answer appeared in {len(states)} step(s), not streamed: {states!r}"
    assert all(shown.startswith(s) and len(s) < len(shown) for s in partial)
    assert [len(s) for s in partial] == sorted(len(s) for s in partial)


def test_stop_ends_the_answer_and_cancels_the_request(
    server: Server, page: webdriver.Chrome, library: OnnxTextGenerator
) -> None:
    base = server[0]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a long story"}]
    full = library.generate(messages, max_new_tokens=90, do_sample=False)
    assert full.generated_tokens >= 40  # otherwise there would be nothing to stop (~1.2 s of tokens at 30 ms)
    before = metrics(base)

    _send(page, "Tell me a long story", max_tokens=90, system="Be brief.")
    WebDriverWait(page, 10).until(lambda d: _answer(d, 1))  # the first pieces are shown
    page.find_element(By.ID, "stop").click()
    _idle(page)
    stopped = _answer(page, 1)
    time.sleep(0.5)
    assert _answer(page, 1) == stopped  # it no longer grows
    assert stopped and full.text.startswith(stopped) and len(stopped) < len(full.text)
    assert page.find_element(By.ID, "answer-1").get_attribute("data-finish") == "stopped"

    cancelled = f'inference4py_requests_cancelled_total{{model="{NAME}"}}'
    generated = f'inference4py_generation_tokens_total{{model="{NAME}"}}'
    deadline = time.time() + 10
    after = metrics(base)
    while (after[cancelled] == before[cancelled] or after[generated] == before[generated]) and time.time() < deadline:
        time.sleep(0.1)  # the stream's tokens are counted as it closes
        after = metrics(base)
    assert after[cancelled] == before[cancelled] + 1  # the server noticed the disconnect
    assert 0 < after[generated] - before[generated] < full.generated_tokens  # and stopped generating

    # the page is usable again: Stop is off, Send is on, and the next message is answered
    assert not page.find_element(By.ID, "stop").is_enabled()
    assert page.find_element(By.ID, "send").is_enabled()
    assert _ask(page, 2, "ok", max_tokens=3, system="Be brief.")


def test_each_turn_sends_the_conversation_so_far(page: webdriver.Chrome, library: OnnxTextGenerator) -> None:
    first = [{"role": "user", "content": "Hi"}]
    shown_1 = _ask(page, 1, "Hi", max_tokens=8)
    assert shown_1 == library.generate(first, max_new_tokens=8, do_sample=False).text

    conversation = [*first, {"role": "assistant", "content": shown_1}, {"role": "user", "content": "And then?"}]
    alone = library.generate([conversation[-1]], max_new_tokens=8, do_sample=False).text
    want = library.generate(conversation, max_new_tokens=8, do_sample=False).text
    assert want != alone  # the answer tells whether the first turn was sent
    assert _ask(page, 2, "And then?", max_tokens=8) == want

    page.find_element(By.ID, "new-chat").click()  # a new chat forgets the turns
    assert _ask(page, 1, "And then?", max_tokens=8) == alone


def test_a_server_error_is_shown_and_the_message_kept(page: webdriver.Chrome) -> None:
    page.execute_script(
        "const s = document.getElementById('model'); s.add(new Option('nope', 'nope')); s.value = 'nope';"
    )
    page.find_element(By.ID, "message").send_keys("Hi")
    page.find_element(By.ID, "send").click()
    _idle(page)
    error = page.find_element(By.ID, "error")
    assert error.is_displayed() and "'nope' does not exist here" in error.text
    assert page.find_element(By.ID, "message").get_attribute("value") == "Hi"  # given back for another try
    assert _answer(page, 1) is None

    Select(page.find_element(By.ID, "model")).select_by_value(NAME)
    page.find_element(By.ID, "message").clear()
    assert _ask(page, 1, "Hi", max_tokens=2)
    assert not page.find_element(By.ID, "error").is_displayed()


def test_an_api_key_is_sent_as_a_bearer_token_and_kept(server: Server, page: webdriver.Chrome) -> None:
    authorizations = server[1]
    authorizations.clear()
    _set(page, "api-key", "sk-test")
    page.find_element(By.ID, "message").click()  # leaving the field reloads the models with the key
    assert _ask(page, 1, "Hi", max_tokens=2)
    assert authorizations == [b"Bearer sk-test", b"Bearer sk-test"]  # GET /v1/models, POST /v1/chat/completions

    page.refresh()
    WebDriverWait(page, 10).until(lambda d: Select(d.find_element(By.ID, "model")).options)
    assert page.find_element(By.ID, "api-key").get_attribute("value") == "sk-test"
    assert authorizations[-1] == b"Bearer sk-test"  # the reloaded page lists the models with the kept key
