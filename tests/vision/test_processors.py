"""Image loading and preprocessing (inference4py.vision) against the recorded pixels.

llava-tiny/pixel_values.npz holds the pixel values transformers' CLIPImageProcessor gave for each
reference case (tools/fixtures/vision_language.py); the genai-phi3v pixels come from
onnxruntime-genai's own Phi3ImageTransform, run here when it is installed (test extra).
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from inference4py.errors import InvalidInputError, UnsupportedModelError
from inference4py.vision import (
    ClipImageProcessor,
    Idefics3ImageProcessor,
    Phi3ImageProcessor,
    load_image,
    load_image_processor,
)
from tests.conftest import MODELS, load_reference

LLAVA = MODELS / "llava-tiny"
REF = load_reference("vision_language")
IDEFICS3 = MODELS / "idefics3-tiny"
REF_IDEFICS3 = load_reference("vision_idefics3")


@pytest.mark.parametrize("case", [c for c in REF["cases"] if c["images"]], ids=lambda c: c["name"])
def test_clip_pixels_equal_transformers(case):
    processor = load_image_processor(LLAVA)
    assert isinstance(processor, ClipImageProcessor)
    batch = processor([load_image(LLAVA / p) for p in case["images"]])
    expected = np.load(LLAVA / "pixel_values.npz")[case["name"]]
    assert batch.inputs["pixel_values"].shape == expected.shape == (len(case["images"]), 3, 32, 32)
    np.testing.assert_allclose(batch.inputs["pixel_values"], expected, atol=1e-6)
    # 4 x 4 patches of 8 px, CLS dropped ("default" strategy): 16 tokens, not config.json's image_seq_length 576
    assert batch.tokens == (REF["image_tokens_per_image"],) * len(case["images"]) == (16,) * len(case["images"])


@pytest.mark.parametrize("case", [c for c in REF_IDEFICS3["cases"] if c["images"]], ids=lambda c: c["name"])
def test_idefics3_frames_equal_transformers(case):
    processor = load_image_processor(IDEFICS3)
    assert isinstance(processor, Idefics3ImageProcessor)
    batch = processor([load_image(IDEFICS3 / p) for p in case["images"]])
    expected = np.load(IDEFICS3 / "pixel_values.npz")[case["name"]]
    assert batch.inputs["pixel_values"].shape == expected.shape == (1, case["frames"], 3, 32, 32)
    np.testing.assert_allclose(batch.inputs["pixel_values"], expected, atol=1e-6)
    assert batch.inputs["pixel_attention_mask"].shape == (1, case["frames"], 32, 32)
    assert batch.inputs["pixel_attention_mask"].all()
    # wide.png (48 x 36) -> 64 x 48 -> 64 x 64: a 2 x 2 grid + the global frame, 4 tokens each
    assert sum(batch.tokens) == 4 * case["frames"]
    first = batch.texts[0]
    assert first.count("<image>") == batch.tokens[0] and first.endswith("<image><fake_token_around_image>")
    if case["name"] == "one-image":
        assert first.startswith("<fake_token_around_image><row_1_col_1><image>") and "<row_2_col_2>" in first
        assert "\n\n<fake_token_around_image><global-img>" in first


def test_idefics3_without_splitting_is_one_square_frame():
    processor = Idefics3ImageProcessor(
        {"size": {"longest_edge": 64}, "max_image_size": {"longest_edge": 32}, "do_image_splitting": False}, seq_len=4
    )
    batch = processor([Image.new("RGB", (50, 10), (0, 255, 0))])
    assert batch.inputs["pixel_values"].shape == (1, 1, 3, 32, 32) and batch.tokens == (4,)
    assert batch.texts == ("<fake_token_around_image><global-img>" + "<image>" * 4 + "<fake_token_around_image>",)


def test_phi3_hd_transform_equals_onnxruntime_genai():
    import onnxruntime_genai as og  # the test extra (.[test,genai]) installs it: a missing one fails

    folder = MODELS / "genai-phi3v"
    processor = load_image_processor(folder)
    assert isinstance(processor, Phi3ImageProcessor)
    genai = og.Model(str(folder)).create_multimodal_processor()
    for name in ("red.png", "blue.png"):
        path = MODELS / "genai-media" / name
        theirs = genai("<|user|>\n<|image_1|>\nx<|end|>\n", images=og.Images.open(str(path)))
        ids = theirs["input_ids"].as_numpy()
        batch = processor([load_image(path)])
        pixels = theirs["pixel_values"].as_numpy()
        np.testing.assert_array_equal(batch.inputs["image_sizes"], theirs["image_sizes"].as_numpy())
        np.testing.assert_array_equal(batch.inputs["pixel_values"][:, 1:], pixels[:, 1:])  # the crops: exact
        # the 336 px global view: pillow's bicubic vs genai's own resize, close but not bit-equal
        np.testing.assert_allclose(batch.inputs["pixel_values"][:, 0], pixels[:, 0], atol=0.05)
        assert batch.tokens == (int((ids < 0).sum()),)


def test_load_image_forms_agree_and_errors_name_the_fix(tmp_path):
    path = LLAVA / "images" / "sunset.png"
    pil = Image.open(path)
    arr = np.asarray(pil.convert("RGB"))
    for item in (path, str(path), path.read_bytes(), pil, arr, np.dstack([arr, np.full(arr.shape[:2], 255, np.uint8)])):
        np.testing.assert_array_equal(np.asarray(load_image(item)), arr)
    with pytest.raises(InvalidInputError, match="does not exist. Check the path"):
        load_image(tmp_path / "missing.png")
    with pytest.raises(InvalidInputError, match="cannot be decoded"):
        load_image(b"not an image")
    with pytest.raises(InvalidInputError, match="cannot be decoded"):
        load_image(path.read_bytes()[:60])
    with pytest.raises(InvalidInputError, match="empty"):
        load_image(b"", 1)
    with pytest.raises(InvalidInputError, match="uint8"):
        load_image(arr.astype(np.float32))
    with pytest.raises(InvalidInputError, match="unsupported type int"):
        load_image(3)
    import base64

    url = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    np.testing.assert_array_equal(np.asarray(load_image(url)), arr)
    with pytest.raises(InvalidInputError, match="base64 data is invalid"):
        load_image("data:image/png;base64,@@@")
    with pytest.raises(InvalidInputError, match="without base64 data"):
        load_image("data:image/png,rawdata")
    with pytest.raises(InvalidInputError, match="does not download images"):
        load_image("https://example.com/cat.png")
    buffer = io.BytesIO()
    pil.save(buffer, format="BMP")
    np.testing.assert_array_equal(np.asarray(load_image(buffer.getvalue())), arr)


def test_unsupported_or_missing_processor_config(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "Qwen2VLImageProcessor"}))
    with pytest.raises(UnsupportedModelError, match=r"Qwen2VLImageProcessor.*supported: CLIPImageProcessor"):
        load_image_processor(tmp_path)
    (tmp_path / "preprocessor_config.json").unlink()
    ops = {"processor": {"transforms": [{"operation": {"type": "Gemma3ImageTransform"}}]}}
    (tmp_path / "processor_config.json").write_text(json.dumps(ops))
    with pytest.raises(UnsupportedModelError, match="inference4py_genai.VisionLanguageModel"):
        load_image_processor(tmp_path)
    (tmp_path / "processor_config.json").unlink()
    with pytest.raises(UnsupportedModelError, match="no image-processor configuration"):
        load_image_processor(tmp_path)


def test_clip_resize_to_fixed_size_and_small_image_crop():
    processor = ClipImageProcessor(
        {"size": {"height": 20, "width": 24}, "do_center_crop": False, "image_processor_type": "SiglipImageProcessor"},
        tokens_per_image=7,
    )
    batch = processor([Image.new("RGB", (50, 10), (255, 0, 0))])
    assert batch.inputs["pixel_values"].shape == (1, 3, 20, 24) and batch.tokens == (7,)
    red = (1.0 - 0.48145466) / 0.26862954
    np.testing.assert_allclose(batch.inputs["pixel_values"][0, 0], red, rtol=1e-6)
