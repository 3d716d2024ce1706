"""Images through the server, for real: uvicorn on 127.0.0.1 and a free port, driven with the official clients.

The vision-language fixtures (llava-tiny, idefics3-tiny, genai-phi3v) are served beside a text model.
Each answer is compared with :meth:`VisionLanguageModel.generate` on the same folder, images and
prompt: the same text, and per token the same token and log-probability (``logprobs``), so the same
ids; the library's ids are transformers' (tests/tasks/test_vision_language.py). Images come as
OpenAI chat ``image_url`` data URLs, Responses ``input_image`` parts and Anthropic base64 ``image``
blocks; web addresses are refused unless their host is allowed, and fetched from a local HTTP
server when it is. Bad images get each API's 400 error object naming the part, and the server goes
on answering.
"""

from __future__ import annotations

import base64
import http.server
import io
import threading
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest
from PIL import Image

from inference4py import VisionLanguageModel
from inference4py.serve import ServerSettings, create_app, load_models
from tests.conftest import FIXTURES, MODELS, load_reference
from tests.serve.support import running

LLAVA = MODELS / "llava-tiny"
IDEFICS3 = MODELS / "idefics3-tiny"
PHI3V = MODELS / "genai-phi3v"
CASES = {c["name"]: c for c in load_reference("vision_language")["cases"]}
SUNSET, SEA, GRASS = (LLAVA / "images" / n for n in ("sunset.png", "sea.png", "grass.png"))


def data_url(path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def models():
    loaded = load_models([str(LLAVA), str(IDEFICS3), str(PHI3V), str(MODELS / "qwen2")])
    assert all(isinstance(loaded[n], VisionLanguageModel) for n in ("llava-tiny", "idefics3-tiny", "genai-phi3v"))
    return loaded


@pytest.fixture(scope="module")
def direct():
    """The library's own models on the same folders (not the served objects)."""
    opened = {f.name: VisionLanguageModel.builder().model_path(f).build() for f in (LLAVA, IDEFICS3, PHI3V)}
    yield opened
    for model in opened.values():
        model.close()


@pytest.fixture(scope="module")
def image_host():
    """A local HTTP server with the fixture images (and a redirect to another host) on 127.0.0.1."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", "http://localhost.invalid/sunset.png")
                self.end_headers()
                return
            path = LLAVA / "images" / self.path.lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def server(models):
    with running(create_app(models)) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server, api_key="none", max_retries=0)


def user(text: str, *paths) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": data_url(p)}} for p in paths]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def alone(direct, folder, paths, text, max_new_tokens=12):
    """The library's answer: text, and each token's (piece, log-probability)."""
    result = direct[folder.name].generate(list(paths), text, max_new_tokens=max_new_tokens, logprobs=True)
    return result, [(t.token, t.logprob) for t in result.logprobs]


def same_tokens(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [t for t, _ in got] == [t for t, _ in want]
    assert [round(p, 4) for _, p in got] == [round(p, 4) for _, p in want]


# ------------------------------------------------------------------ OpenAI chat completions
@pytest.mark.parametrize("name", ["one-image", "two-images"])
def test_chat_image_url_answers_as_generate(client, direct, name):
    case = CASES[name]
    paths = [LLAVA / p for p in case["images"]]
    want, tokens = alone(direct, LLAVA, paths, case["text"])
    assert list(want.token_ids) == case["output_ids"]  # transformers' ids (the fixture's reference)
    out = client.chat.completions.create(
        model="llava-tiny", messages=user(case["text"], *paths), max_tokens=12, logprobs=True
    )
    assert out.choices[0].message.content == want.text
    same_tokens([(t.token, t.logprob) for t in out.choices[0].logprobs.content], tokens)
    assert out.usage.prompt_tokens == want.prompt_tokens  # the image tokens counted
    assert out.usage.completion_tokens == len(want.token_ids)
    # streamed: the same tokens, piece by piece
    stream = client.chat.completions.create(
        model="llava-tiny",
        messages=user(case["text"], *paths),
        max_tokens=12,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, streamed, usage = [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            streamed += [(t.token, t.logprob) for t in (choice.logprobs.content if choice.logprobs else None) or []]
    assert "".join(pieces) == want.text
    same_tokens(streamed, tokens)
    assert usage.prompt_tokens == want.prompt_tokens


@pytest.mark.parametrize("folder", [IDEFICS3, PHI3V], ids=lambda f: f.name)
def test_every_vision_layout_is_served(client, claude, direct, folder):
    image = (
        next((folder / "images").glob("*.png"))
        if (folder / "images").is_dir()
        else FIXTURES / "models" / "genai-media" / "red.png"
    )
    want, tokens = alone(direct, folder, [image], "Describe this image.", max_new_tokens=8)
    out = client.chat.completions.create(
        model=folder.name, messages=user("Describe this image.", image), max_tokens=8, logprobs=True
    )
    assert out.choices[0].message.content == want.text
    same_tokens([(t.token, t.logprob) for t in out.choices[0].logprobs.content], tokens)
    image_block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(image)}}
    blocks = [image_block, {"type": "text", "text": "Describe this image."}]
    with claude.messages.stream(model=folder.name, max_tokens=8, messages=[{"role": "user", "content": blocks}]) as s:
        assert "".join(s.text_stream) == want.text


def test_models_say_which_read_images(client):
    cards = {m.id: m.model_extra for m in client.models.list().data}
    assert "vision" in cards["llava-tiny"]["capabilities"] and "chat" in cards["llava-tiny"]["capabilities"]
    assert "vision" not in cards["qwen2"]["capabilities"]


def test_concurrent_requests_each_equal_themselves_alone(client, direct):
    """Vision requests wait for the model's thread (one at a time); a chat of the text model runs beside them."""
    asks = [([SUNSET], "Describe this image."), ([SEA], "Describe this image."), ([SUNSET, GRASS], "What differs?")]
    asks = asks * 2
    wants = [alone(direct, LLAVA, paths, text)[0].text for paths, text in asks]

    def ask(i):
        paths, text = asks[i]
        out = client.chat.completions.create(model="llava-tiny", messages=user(text, *paths), max_tokens=12)
        return out.choices[0].message.content

    def chat():
        stream = client.chat.completions.create(
            model="qwen2", messages=[{"role": "user", "content": "Hello"}], max_tokens=16, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with ThreadPoolExecutor(len(asks) + 1) as pool:
        text_chat = pool.submit(chat)
        got = list(pool.map(ask, range(len(asks))))
        assert isinstance(text_chat.result(), str)
    assert got == wants


def test_a_vision_folder_of_models_dir_loads_on_demand(tmp_path, direct):
    import shutil

    shutil.copytree(LLAVA, tmp_path / "vlm")
    shutil.copytree(MODELS / "qwen2", tmp_path / "qwen2")
    want, _ = alone(direct, LLAVA, [SEA], "Describe this image.")
    with running(create_app({}, ServerSettings(models_dir=tmp_path))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        cards = {m.id: m.model_extra for m in client.models.list().data}
        assert cards["vlm"]["capabilities"] == ["chat", "vision"] and cards["vlm"]["status"] == "unloaded"
        out = client.chat.completions.create(model="vlm", messages=user("Describe this image.", SEA), max_tokens=12)
        assert out.choices[0].message.content == want.text
        with pytest.raises(openai.BadRequestError, match="text-only model"):  # the text model beside it
            client.chat.completions.create(model="qwen2", messages=user("Describe this image.", SEA), max_tokens=2)


def test_a_chat_template_given_at_start(direct):
    """serve --chat-template NAME=FILE on a vision-language model: its chats render with it, images included."""
    template = (LLAVA / "chat_template.jinja").read_text().replace("'ASSISTANT:'", "'Answer briefly. ASSISTANT:'")
    with VisionLanguageModel.builder().model_path(LLAVA).chat_template(template).build() as vlm:
        assert vlm.render_prompt("Describe this image.", [SEA]).endswith("Answer briefly. ASSISTANT:")
        want = vlm.generate([SEA], "Describe this image.", max_new_tokens=12).text
    assert want != alone(direct, LLAVA, [SEA], "Describe this image.")[0].text  # the template changes the answer
    with running(create_app(load_models([str(LLAVA)], chat_template=lambda name: template))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        out = client.chat.completions.create(
            model="llava-tiny", messages=user("Describe this image.", SEA), max_tokens=12
        )
        assert out.choices[0].message.content == want


# ------------------------------------------------------------------ Anthropic Messages and OpenAI Responses
def test_anthropic_base64_image_blocks(claude, direct):
    case = CASES["two-images"]
    paths = [LLAVA / p for p in case["images"]]
    want, _ = alone(direct, LLAVA, paths, case["text"])
    blocks = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(p)}} for p in paths]
    messages = [{"role": "user", "content": [*blocks, {"type": "text", "text": case["text"]}]}]
    out = claude.messages.create(model="llava-tiny", max_tokens=12, messages=messages)
    assert out.content[0].text == want.text
    assert out.usage.input_tokens == want.prompt_tokens and out.usage.output_tokens == len(want.token_ids)
    with claude.messages.stream(model="llava-tiny", max_tokens=12, messages=messages) as stream:
        assert "".join(stream.text_stream) == want.text
    counted = claude.messages.count_tokens(model="llava-tiny", messages=messages)
    assert counted.input_tokens == want.prompt_tokens


def test_responses_input_image(client, direct):
    want, _ = alone(direct, LLAVA, [SEA], "Describe this image.")
    content = [
        {"type": "input_image", "image_url": data_url(SEA)},
        {"type": "input_text", "text": "Describe this image."},
    ]
    out = client.responses.create(
        model="llava-tiny", input=[{"role": "user", "content": content}], max_output_tokens=12
    )
    assert out.output_text == want.text
    streamed = client.responses.create(
        model="llava-tiny", input=[{"role": "user", "content": content}], max_output_tokens=12, stream=True
    )
    text = "".join(e.delta for e in streamed if e.type == "response.output_text.delta")
    assert text == want.text


# ------------------------------------------------------------------ image addresses
def test_http_image_refused_by_default(client, image_host):
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe this image."},
                {"type": "image_url", "image_url": {"url": f"{image_host}/sunset.png"}},
            ],
        }
    ]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="llava-tiny", messages=messages, max_tokens=4)
    message = err.value.body["message"]
    assert "messages[0].content[1].image_url.url" in message and "--allow-image-domain" in message
    assert err.value.body["param"] == "messages[0].content[1].image_url.url"


def llava_alone():
    """llava-tiny for a server of its own (a server closes its models when it stops)."""
    return load_models([str(LLAVA)])


def test_http_image_fetched_from_an_allowed_host_only(direct, image_host):
    want, _ = alone(direct, LLAVA, [SUNSET], "Describe this image.")
    settings = ServerSettings(allow_image_domains=["127.0.0.1"], max_image_mb=1, image_fetch_timeout=5)
    with running(create_app(llava_alone(), settings)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)

        def ask(address):
            part = {"type": "image_url", "image_url": {"url": address}}
            content = [part, {"type": "text", "text": "Describe this image."}]
            return client.chat.completions.create(
                model="llava-tiny", messages=[{"role": "user", "content": content}], max_tokens=12
            )

        assert ask(f"{image_host}/sunset.png").choices[0].message.content == want.text
        port = image_host.rsplit(":", 1)[1]
        for address, says in [
            (f"http://localhost:{port}/sunset.png", "does not fetch images from 'localhost'"),
            (f"{image_host}/redirect", "redirects to 'localhost.invalid'"),
            (f"{image_host}/missing.png", "HTTP 404"),
        ]:
            with pytest.raises(openai.BadRequestError) as err:
                ask(address)
            assert says in err.value.body["message"]
        # Anthropic's url source goes the same way
        claude = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0)
        block = {"type": "image", "source": {"type": "url", "url": f"{image_host}/sunset.png"}}
        out = claude.messages.create(
            model="llava-tiny",
            max_tokens=12,
            messages=[{"role": "user", "content": [block, {"type": "text", "text": "Describe this image."}]}],
        )
        assert out.content[0].text == want.text


# ------------------------------------------------------------------ bad images
def test_bad_images_get_each_apis_400(server, client, claude):
    def chat(content, model="llava-tiny"):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}], max_tokens=4)
        return err.value.body

    text = {"type": "text", "text": "Describe this image."}
    not_image = "data:image/png;base64," + base64.b64encode(b"this is not an image").decode()
    body = chat([text, {"type": "image_url", "image_url": {"url": not_image}}])
    assert "messages[0].content[1].image_url.url: the data is not an image" in body["message"]
    body = chat([text, {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}])
    assert "base64 data is invalid" in body["message"]
    # more images than the context holds (16 tokens each, 256 positions)
    body = chat([*({"type": "image_url", "image_url": {"url": data_url(SEA)}} for _ in range(16)), text])
    assert body["code"] == "context_length_exceeded", body
    assert "16 image(s)' tokens" in body["message"]
    # an image for a model without vision
    body = chat([text, {"type": "image_url", "image_url": {"url": data_url(SEA)}}], model="qwen2")
    assert "text-only model" in body["message"] and body["param"] == "messages[0].content[1]"
    # audio to a model that reads text and images, with or without an image beside it
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    for content in ([text, audio], [{"type": "image_url", "image_url": {"url": data_url(SEA)}}, audio]):
        body = chat(content)
        assert "reads text and images" in body["message"] and body["param"] == "messages[0].content[1]"
    # a completion prompt has no room for images: the vision model answers chats
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="llava-tiny", prompt="Describe", max_tokens=4)
    assert "/v1/chat/completions" in err.value.body["message"]
    # Anthropic's error object, naming the block
    with pytest.raises(anthropic.BadRequestError) as err:
        block = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(MODELS / "qwen2" / "config.json")},
        }
        claude.messages.create(model="llava-tiny", max_tokens=4, messages=[{"role": "user", "content": [block]}])
    assert err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert "messages.0.content.0" in err.value.body["error"]["message"]
    # the server goes on answering
    out = client.chat.completions.create(model="llava-tiny", messages=user("Describe this image.", SEA), max_tokens=2)
    assert out.usage.completion_tokens == 2


def test_too_large_image():
    big = io.BytesIO()
    Image.effect_noise((700, 700), 64).convert("RGB").save(big, format="PNG")
    assert big.tell() > 1 << 20
    with running(create_app(llava_alone(), ServerSettings(max_image_mb=1))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        part = {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(big.getvalue()).decode()},
        }
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(
                model="llava-tiny", messages=[{"role": "user", "content": [part]}], max_tokens=2
            )
        assert "has 1" in err.value.body["message"] and "more than this server's limit" in err.value.body["message"]
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
