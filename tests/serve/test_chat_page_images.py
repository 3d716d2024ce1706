"""The chat page attaches images for a vision-language model, driven in headless Chromium against the real server.

The answer the page shows is compared with :meth:`VisionLanguageModel.generate` on the same image and
text; the attach control shows only for a model whose ``/v1/models`` card says ``vision``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("selenium")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from inference4py import VisionLanguageModel  # noqa: E402
from inference4py.serve import create_app, load_models  # noqa: E402
from tests.conftest import MODELS  # noqa: E402
from tests.serve.support import running  # noqa: E402

LLAVA = MODELS / "llava-tiny"
SUNSET, GRASS = LLAVA / "images" / "sunset.png", LLAVA / "images" / "grass.png"
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs the chromium and chromedriver binaries (.ci/run installs them: apt-get install chromium chromium-driver)",
)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running(create_app(load_models([str(LLAVA), str(MODELS / "qwen2")]))) as url:
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


def _idle(driver: webdriver.Chrome) -> None:
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.state") == "idle")


def test_an_attached_image_is_answered_as_the_library_answers(server: str, browser: webdriver.Chrome) -> None:
    browser.get(f"{server}/")
    WebDriverWait(browser, 10).until(lambda d: Select(d.find_element(By.ID, "model")).options)
    picker = Select(browser.find_element(By.ID, "model"))
    assert sorted(o.text for o in picker.options) == ["llava-tiny", "qwen2"]
    row = browser.find_element(By.ID, "attach-row")
    picker.select_by_visible_text("qwen2")
    assert not row.is_displayed()  # a text-only model takes no images
    picker.select_by_visible_text("llava-tiny")
    assert row.is_displayed()

    files = browser.find_element(By.ID, "images")
    files.send_keys(str(SUNSET))
    files.send_keys(str(GRASS))
    thumbs = "return document.querySelectorAll('#thumbs img').length"
    WebDriverWait(browser, 10).until(lambda d: d.execute_script(thumbs) == 2)
    browser.find_element(By.CSS_SELECTOR, "#thumbs .thumb:last-child button").click()  # grass removed again
    assert browser.execute_script(thumbs) == 1

    for element_id, value in (("temperature", "0"), ("max-tokens", "12")):
        browser.find_element(By.ID, element_id).send_keys(value)
    box = browser.find_element(By.ID, "message")
    box.send_keys("Describe this image.")
    box.send_keys(Keys.ENTER)
    _idle(browser)
    shown = browser.execute_script("const a = document.querySelector('#answer-1 .text'); return a && a.textContent")
    assert shown is not None, browser.find_element(By.ID, "error").text
    with VisionLanguageModel.builder().model_path(LLAVA).build() as vlm:
        assert shown == vlm.generate(SUNSET, "Describe this image.", max_new_tokens=12, do_sample=False).text
    # the question shows its image; the attachments are cleared for the next message
    assert browser.execute_script("return document.querySelectorAll('.message.user .images img').length") == 1
    assert browser.execute_script(thumbs) == 0
    logs = browser.get_log("browser")  # type: ignore[no-untyped-call]  # selenium leaves it untyped
    assert not [e for e in logs if e["level"] == "SEVERE"]  # the page's policy let the previews show
