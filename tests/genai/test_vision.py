"""inference4py_genai.VisionLanguageModel on a tiny Phi-3-vision-layout genai folder.

models/genai-phi3v: the text decoder was built by onnxruntime-genai's model
builder (Phi3V path, embeddings excluded); vision.onnx / embedding.onnx are toy
graphs written by tools/fixtures/genai.py; images go through genai's real
multimodal processor (Phi3ImageTransform).  references/genai.json holds
transformers' ids for the same inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import FIXTURES
from tests.genai.conftest import folder, reference, require_genai

genai = require_genai()

from inference4py.errors import ConfigurationError, InvalidInputError, PromptTooLongError, UnsupportedModelError  # noqa: E402
from inference4py.generation.result import GenerationResult  # noqa: E402
from inference4py_genai import VisionLanguageModel  # noqa: E402

REF = reference("genai-phi3v")
CASES = {c["name"]: c for c in REF["cases"]}
_vlm: list[VisionLanguageModel] = []


def vlm() -> VisionLanguageModel:
    if not _vlm:
        _vlm.append(VisionLanguageModel.builder().model_path(folder("genai-phi3v")).build())
    return _vlm[0]


def _images(case):
    return [FIXTURES / p for p in case["images"]]


@pytest.mark.parametrize("name", list(CASES))
def test_generate_on_images_matches_transformers(name):
    case = CASES[name]
    images = _images(case)
    model = vlm()
    assert model.render_prompt(case["text"], len(images)) == case["rendered"]
    result = model.generate(images or None, case["text"], max_new_tokens=case["max_new_tokens"])
    assert isinstance(result, GenerationResult)
    assert list(result.token_ids) == case["output_ids"]
    assert result.text == case["output_text"]
    assert result.prompt_tokens == case["prompt_tokens"]  # image tokens included


def test_images_change_the_answer():
    assert CASES["one-image"]["output_ids"] != CASES["other-image"]["output_ids"]  # guarded by the fixture builder


def test_image_forms_path_bytes_pil_array_agree():
    from PIL import Image

    case = CASES["one-image"]
    path = _images(case)[0]
    expected = case["output_ids"]
    model = vlm()
    pil = Image.open(path)
    import io

    bmp = io.BytesIO()
    pil.save(bmp, format="BMP")  # re-encoded as PNG on the way: lossless, same pixels
    for image in (str(path), path.read_bytes(), pil, np.asarray(pil.convert("RGB")), [path], bmp.getvalue()):
        assert list(model.generate(image, case["text"], max_new_tokens=case["max_new_tokens"]).token_ids) == expected


def test_stream_and_stop_sequences():
    case = CASES["two-images"]
    model = vlm()
    images = _images(case)
    pieces = list(model.stream(images, case["text"], max_new_tokens=case["max_new_tokens"]))
    assert "".join(pieces) == case["output_text"]
    text = case["output_text"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    result = model.generate(images, case["text"], max_new_tokens=case["max_new_tokens"], stop_sequences=[stop])
    assert result.finish_reason == "stop" and result.text == text[: text.index(stop)]


def test_sampling_and_python_processors_on_multimodal_inputs():
    case = CASES["one-image"]
    model = vlm()
    images = _images(case)
    a = model.generate(images, case["text"], max_new_tokens=8, temperature=1.5, seed=1)
    assert a.token_ids == model.generate(images, case["text"], max_new_tokens=8, temperature=1.5, seed=1).token_ids
    assert list(a.token_ids) != case["output_ids"][:8]
    banned = case["output_ids"][0]
    result = model.generate(images, case["text"], max_new_tokens=4, suppress_tokens=[banned])
    assert banned not in result.token_ids


def test_chat_messages_and_system_prompt():
    case = CASES["one-image"]
    messages = [{"role": "user", "content": case["text"]}]
    assert vlm().render_prompt(messages, 1) == case["rendered"]
    with_system = VisionLanguageModel.builder().model_path(folder("genai-phi3v")).system_prompt("Be brief.").build()
    assert with_system.render_prompt(case["text"], 1).startswith(
        "<|system|>\nBe brief.<|end|>\n<|user|>\n<|image_1|>\n"
    )


def test_errors():
    model = vlm()
    with pytest.raises(InvalidInputError, match="does not exist"):
        model.generate(FIXTURES / "models" / "genai-media" / "missing.png", "Describe.")
    with pytest.raises(InvalidInputError, match="cannot be decoded"):
        model.generate(b"not an image", "Describe.")  # genai's own decoder would end the process
    truncated = (FIXTURES / "models" / "genai-media" / "red.png").read_bytes()[:60]
    with pytest.raises(InvalidInputError, match="cannot be decoded"):
        model.generate(truncated, "Describe.")
    with pytest.raises(InvalidInputError, match="empty"):
        model.generate(None, "")
    with pytest.raises(PromptTooLongError, match="context"):
        model.generate(_images(CASES["two-images"]), "x", max_new_tokens=400)
    with pytest.raises(UnsupportedModelError, match="vision"):
        VisionLanguageModel.builder().model_path(folder("genai-llama")).build()
    with pytest.raises(ConfigurationError):
        VisionLanguageModel.builder().image_tag("")


def test_preset():
    b = VisionLanguageModel.phi3Vision()
    assert b._model_id == "inference4j/phi-3.5-vision-instruct"
    assert "phi3Vision" in repr(b.max_new_tokens(10))


def test_typed_options_give_the_same_tokens_as_keywords():
    import inspect

    from inference4py import RequestOptions
    from inference4py import VisionLanguageModel as NativeVisionLanguageModel

    case = CASES["one-image"]
    model = vlm()
    images = _images(case)
    typed = model.generate(images, case["text"], options=RequestOptions(max_new_tokens=case["max_new_tokens"]))
    assert list(typed.token_ids) == case["output_ids"]
    pieces = model.stream(images, case["text"], options=RequestOptions(max_new_tokens=case["max_new_tokens"]))
    assert "".join(pieces) == case["output_text"]
    # keywords beside options replace its fields (RequestOptions.of_call)
    both = model.generate(images, case["text"], options=RequestOptions(max_new_tokens=30), max_new_tokens=3)
    assert list(both.token_ids) == case["output_ids"][:3]
    with pytest.raises(ConfigurationError, match="json_schema|constrain|output"):
        model.generate(images, case["text"], options=RequestOptions(json_schema={"type": "object"}))
    for method in ("generate", "stream", "stream_chunks"):
        ours = inspect.signature(getattr(VisionLanguageModel, method)).parameters
        native = inspect.signature(getattr(NativeVisionLanguageModel, method)).parameters
        assert list(ours) == list(native), method
