"""serve/images.py: which hosts an image may be fetched from, and the byte, pixel and time limits of a fetch.

The fetches go to a local HTTP server on 127.0.0.1; the routes' use of all this is
tests/serve/test_vision_server.py.
"""

from __future__ import annotations

import asyncio
import http.server
import io
import threading
import time

import pytest
from PIL import Image

from inference4py.errors import ConfigurationError
from inference4py.serve import ServerSettings
from inference4py.serve.images import ImagePart, ImagePolicy, image_part, resolve_images
from inference4py.serve.protocol import ApiError
from tests.conftest import MODELS

PNG = (MODELS / "llava-tiny" / "images" / "sea.png").read_bytes()


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def host():
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path == "/slow":  # each piece in time, the whole too slow
                self.send_response(200)
                self.send_header("Content-Length", str(len(PNG)))
                self.end_headers()
                for i in range(0, len(PNG), 16):
                    self.wfile.write(PNG[i : i + 16])
                    self.wfile.flush()
                    time.sleep(0.1)
                return
            body = PNG * 40 if self.path == "/big" else PNG
            self.send_response(200)
            if self.path != "/big":  # a large body that does not say its size
                self.send_header("Content-Length", str(len(body)))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def resolve(part: ImagePart, policy: ImagePolicy) -> bytes:
    messages = [{"role": "user", "content": [{"type": "image", "image": part}, {"type": "text", "text": "hi"}]}]
    (message,) = asyncio.run(resolve_images(messages, policy))
    assert message["content"][1] == {"type": "text", "text": "hi"}
    return message["content"][0]["image"]


def test_a_host_allows_its_subdomains_not_lookalikes():
    policy = ImagePolicy(allowed_domains=("example.com",))
    assert policy.allows("example.com") and policy.allows("img.Example.com.")
    assert not policy.allows("badexample.com") and not policy.allows("example.com.evil.net")


def test_fetched_within_the_limits(host):
    policy = ImagePolicy(allowed_domains=("127.0.0.1",), fetch_timeout=2)
    assert resolve(image_part(f"{host}/sea.png", "x"), policy) == PNG
    small = ImagePolicy(allowed_domains=("127.0.0.1",), max_bytes=len(PNG) * 10)
    with pytest.raises(ApiError, match="more than this server's limit"):
        resolve(image_part(f"{host}/big", "x"), small)
    started = time.monotonic()
    with pytest.raises(ApiError, match="took more than 0.5 s"):
        resolve(image_part(f"{host}/slow", "x"), ImagePolicy(allowed_domains=("127.0.0.1",), fetch_timeout=0.5))
    assert time.monotonic() - started < 3


def test_inline_images_are_checked():
    policy = ImagePolicy(max_pixels=100 * 100)
    assert resolve(ImagePart("x", data=_png(100, 100)), policy)
    with pytest.raises(ApiError, match="101 x 100 pixels"):
        resolve(ImagePart("x", data=_png(101, 100)), policy)
    with pytest.raises(ApiError, match="not an image"):
        resolve(ImagePart("messages[0].content[0]", data=b"GIF89a but no more"), policy)
    for value, says in [("file:///etc/passwd", "not 'file:///etc/passwd'"), ("data:image/png,abc", "without base64")]:
        with pytest.raises(ApiError, match=says):
            image_part(value, "x")


def test_settings_take_host_names_only():
    assert ServerSettings(allow_image_domains="127.0.0.1").allow_image_domains == ("127.0.0.1",)
    for bad in ("https://example.com", "example.com:8080", "example.com/images"):
        with pytest.raises(ConfigurationError, match="not a host name"):
            ServerSettings(allow_image_domains=[bad])


def test_the_command_line_options_reach_the_settings(monkeypatch):
    import inference4py.serve as serve_module
    from inference4py.cli.app import main

    calls = []
    monkeypatch.setattr(serve_module, "serve", lambda models, **kw: calls.append(kw["settings"]))
    args = ["serve", "--model", "x", "--allow-image-domain", "a.example", "--allow-image-domain", "127.0.0.1"]
    assert main([*args, "--max-image-mb", "2", "--image-fetch-timeout", "3"]) == 0
    assert main(["serve", "--model", "x"]) == 0
    with_images, default = calls
    assert with_images.allow_image_domains == ("a.example", "127.0.0.1")
    assert (with_images.max_image_mb, with_images.image_fetch_timeout) == (2, 3)
    assert default.allow_image_domains == ()  # nothing is fetched unless asked
    assert main(["serve", "--model", "x", "--allow-image-domain", "http://a.example"]) == 2
