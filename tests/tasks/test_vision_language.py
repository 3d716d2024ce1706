"""VisionLanguageModel on the native loop.

- llava-tiny (tools/fixtures/vision_language.py): a random LLaVA in the optimum / onnx-community parts
  layout; references/vision_language.json holds transformers' rendered prompts, expanded prompt ids and
  greedy ids for one image, another image, two images and text only.
- genai-phi3v (tools/fixtures/genai.py): onnxruntime-genai's Phi-3-vision layout; the ids are
  compared with inference4py_genai's VisionLanguageModel run here, and with the recorded references.
"""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image

import inference4py
from inference4py import VisionLanguageModel
from inference4py.errors import (
    ConfigurationError,
    InvalidInputError,
    ModelFilesMissingError,
    PromptTooLongError,
    UnsupportedModelError,
)
from inference4py.generation.result import GenerationResult
from tests.conftest import FIXTURES, MODELS, load_reference

LLAVA = MODELS / "llava-tiny"
IDEFICS3 = MODELS / "idefics3-tiny"
PHI3V = MODELS / "genai-phi3v"
REF = load_reference("vision_language")
CASES = {c["name"]: c for c in REF["cases"]}
REF_IDEFICS3 = load_reference("vision_idefics3")
PHI3V_CASES = {c["name"]: c for c in load_reference("genai")["models"]["genai-phi3v"]["cases"]}
_models: dict[str, VisionLanguageModel] = {}


def model(folder=LLAVA) -> VisionLanguageModel:
    key = str(folder)
    if key not in _models:
        _models[key] = VisionLanguageModel.builder().model_path(folder).build()
    return _models[key]


def images(case, root=LLAVA):
    return [root / p for p in case["images"]]


# ------------------------------------------------------------------ llava-tiny against transformers
@pytest.mark.parametrize("name", list(CASES))
def test_llava_greedy_ids_equal_transformers(name):
    case = CASES[name]
    vlm = model()
    assert vlm.layout == "optimum"
    assert vlm.render_prompt(case["text"], images(case)) == case["rendered"]
    ids, batch = vlm.encode(case["text"], images(case))
    assert ids == case["prompt_ids"]  # BOS + each <image> expanded to 16 image tokens
    assert ids.count(REF["image_token_id"]) == 16 * len(case["images"])
    result = vlm.generate(images(case), case["text"], max_new_tokens=case["max_new_tokens"])
    assert isinstance(result, GenerationResult)
    assert list(result.token_ids) == case["output_ids"]
    assert result.text == case["output_text"]
    assert result.prompt_tokens == len(case["prompt_ids"])


def test_llava_chat_messages_with_image_parts_path_and_pil():
    case = CASES["two-images"]
    first, second = images(case)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": str(first)},
                {"type": "image", "image": Image.open(second)},
                {"type": "text", "text": case["text"]},
            ],
        }
    ]
    vlm = model()
    assert vlm.render_prompt(messages) == case["rendered"]
    assert list(vlm.generate(None, messages, max_new_tokens=case["max_new_tokens"]).token_ids) == case["output_ids"]
    # OpenAI's image_url parts (a data URL) work the same
    import base64

    urls = ["data:image/png;base64," + base64.b64encode(p.read_bytes()).decode() for p in (first, second)]
    openai = [
        {
            "role": "user",
            "content": [
                *({"type": "image_url", "image_url": {"url": u}} for u in urls),
                {"type": "text", "text": case["text"]},
            ],
        }
    ]
    assert list(vlm.generate(None, openai, max_new_tokens=12).token_ids) == case["output_ids"]
    # placeholders written in the text take the images in order
    written = [{"role": "user", "content": f"<image>\n<image>\n{case['text']}"}]
    assert vlm.render_prompt(written, [first, second]) == case["rendered"]
    assert list(vlm.generate([first, second], written, max_new_tokens=12).token_ids) == case["output_ids"]
    # with none, the images argument goes at the start of the first user message, as for a str prompt
    plain = [{"role": "user", "content": case["text"]}]
    assert list(vlm.generate([first, second], plain, max_new_tokens=12).token_ids) == case["output_ids"]


def test_images_change_the_answer_and_image_order_matters():
    assert len({tuple(c["output_ids"]) for c in CASES.values()}) == len(CASES)
    case = CASES["two-images"]
    swapped = model().generate(images(case)[::-1], case["text"], max_new_tokens=12)
    assert list(swapped.token_ids) != case["output_ids"]


def test_stream_stop_sequences_and_sampling():
    case = CASES["one-image"]
    vlm = model()
    pieces = list(vlm.stream(images(case), case["text"], max_new_tokens=12))
    assert "".join(pieces) == case["output_text"]
    chunks = list(vlm.stream_chunks(images(case), case["text"], max_new_tokens=12))
    assert [c.token_id for c in chunks if c.token_id is not None] == case["output_ids"]
    assert chunks[-1].finish_reason == "length"
    text = case["output_text"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    stopped = vlm.generate(images(case), case["text"], max_new_tokens=12, stop_sequences=[stop])
    assert stopped.finish_reason == "stop" and stopped.text == text[: text.index(stop)]
    a = vlm.generate(images(case), case["text"], max_new_tokens=8, temperature=1.5, seed=3)
    b = vlm.generate(images(case), case["text"], max_new_tokens=8, temperature=1.5, seed=3)
    assert a.token_ids == b.token_ids and list(a.token_ids) != case["output_ids"][:8]
    banned = case["output_ids"][0]
    assert banned not in vlm.generate(images(case), case["text"], max_new_tokens=4, suppress_tokens=[banned]).token_ids


def test_beam_search_runs_and_one_beam_is_greedy():
    case = CASES["other-image"]
    vlm = model()
    assert (
        list(vlm.generate(images(case), case["text"], max_new_tokens=12, num_beams=1).token_ids) == (case["output_ids"])
    )
    beams = vlm.generate(images(case), case["text"], max_new_tokens=6, num_beams=3, num_return_sequences=2)
    assert len(beams.candidates) == 2 and len(beams.token_ids) == 6
    # on the engine path too (genai folder): every beam row reads the prompt with its image tokens
    phi3v = PHI3V_CASES["one-image"]
    paths = [FIXTURES / p for p in phi3v["images"]]
    beams = model(PHI3V).generate(paths, phi3v["text"], max_new_tokens=6, num_beams=3, num_return_sequences=2)
    first, second = beams.candidates
    assert first.score >= second.score and first.token_ids != second.token_ids
    assert (
        list(model(PHI3V).generate(paths, phi3v["text"], max_new_tokens=12, num_beams=1).token_ids)
        == (phi3v["output_ids"])
    )


def test_optimum_layout_at_the_top_of_the_folder(tmp_path):
    folder = tmp_path / "flat"
    shutil.copytree(LLAVA, folder)
    for f in (folder / "onnx").iterdir():
        f.rename(folder / f.name)
    (folder / "onnx").rmdir()
    case = CASES["one-image"]
    vlm = VisionLanguageModel.builder().model_path(folder).build()
    assert list(vlm.generate(images(case), case["text"], max_new_tokens=12).token_ids) == case["output_ids"]


# ------------------------------------------------------------------ idefics3-tiny (SmolVLM-style) against transformers
@pytest.mark.parametrize("case", REF_IDEFICS3["cases"], ids=lambda c: c["name"])
def test_idefics3_greedy_ids_equal_transformers(case):
    vlm = model(IDEFICS3)
    paths = images(case, IDEFICS3)
    assert vlm.render_prompt(case["text"], paths) == case["rendered"]
    ids, batch = vlm.encode(case["text"], paths)
    assert ids == case["prompt_ids"]  # each <image>: frames with row / column markers, then the global frame
    assert ids.count(REF_IDEFICS3["image_token_id"]) == 4 * case["frames"] == sum(batch.tokens)
    result = vlm.generate(paths, case["text"], max_new_tokens=case["max_new_tokens"])
    assert list(result.token_ids) == case["output_ids"]
    assert result.text == case["output_text"]


def test_idefics3_string_contents_and_written_placeholders():
    case = next(c for c in REF_IDEFICS3["cases"] if c["name"] == "two-images")
    paths = images(case, IDEFICS3)
    vlm = model(IDEFICS3)
    # SmolVLM's template iterates the content: a plain string is given to it as one text part (so "User: ",
    # with the space the template puts before a leading text part)
    written = [{"role": "user", "content": f"<image><image>{case['text']}"}]
    assert vlm.render_prompt(written, paths) == case["rendered"].replace("User:", "User: ")
    ids, batch = vlm.encode(written, paths)
    assert ids.count(REF_IDEFICS3["image_token_id"]) == sum(batch.tokens) == 4 * case["frames"]
    assert len(vlm.generate(paths, written, max_new_tokens=3).token_ids) == 3
    text_only = next(c for c in REF_IDEFICS3["cases"] if c["name"] == "text-only")
    assert vlm.render_prompt([{"role": "user", "content": text_only["text"]}]) == text_only["rendered"]


def test_idefics3_chat_parts_with_pil_images():
    case = next(c for c in REF_IDEFICS3["cases"] if c["name"] == "two-images")
    first, second = images(case, IDEFICS3)
    parts = [{"type": "image", "image": Image.open(first)}, {"type": "image", "image": second.read_bytes()}]
    messages = [{"role": "user", "content": [*parts, {"type": "text", "text": case["text"]}]}]
    assert list(model(IDEFICS3).generate(None, messages, max_new_tokens=12).token_ids) == case["output_ids"]


# ------------------------------------------------------------------ genai-phi3v: natively == inference4py_genai
def test_phi3v_natively_equals_inference4py_genai_and_references():
    from inference4py_genai import VisionLanguageModel as GenaiVisionLanguageModel

    native = model(PHI3V)
    assert native.layout == "genai"
    with GenaiVisionLanguageModel.builder().model_path(PHI3V).build() as genai:
        for case in PHI3V_CASES.values():
            paths = [FIXTURES / p for p in case["images"]]
            assert native.render_prompt(case["text"], paths) == case["rendered"]
            ours = native.generate(paths or None, case["text"], max_new_tokens=case["max_new_tokens"])
            theirs = genai.generate(paths or None, case["text"], max_new_tokens=case["max_new_tokens"])
            assert list(ours.token_ids) == list(theirs.token_ids) == case["output_ids"], case["name"]
            assert ours.text == theirs.text == case["output_text"]
            assert ours.prompt_tokens == theirs.prompt_tokens == case["prompt_tokens"]  # 1921 tokens per image


def test_phi3v_prompt_ids_as_genai_writes_them():
    case = PHI3V_CASES["two-images"]
    ids, batch = model(PHI3V).encode(case["text"], [FIXTURES / p for p in case["images"]])
    assert ids[:8] == case["prompt_ids_head"]
    assert ids.count(-1) == ids.count(-2) == batch.tokens[0] == batch.tokens[1] == 1921
    assert batch.inputs["pixel_values"].shape == (2, 17, 3, 336, 336)


# ------------------------------------------------------------------ errors
def test_bad_inputs_raise_our_errors_naming_the_fix(tmp_path):
    vlm = model()
    case = CASES["one-image"]
    with pytest.raises(InvalidInputError, match="does not exist. Check the path"):
        vlm.generate(tmp_path / "missing.png", "Describe.")
    with pytest.raises(
        InvalidInputError, match=r"3 image\(s\) but the prompt has 2 image placeholder.*one placeholder"
    ):
        vlm.generate(images(case) * 3, [{"role": "user", "content": "<image>\n<image>\nTwo?"}], max_new_tokens=2)
    with pytest.raises(InvalidInputError, match=r"1 image\(s\) but the prompt has 2 image placeholder"):
        vlm.generate(images(case), "<image>\n<image>\nTwo?", max_new_tokens=2)
    messages = [
        {"role": "user", "content": [{"type": "image", "image": images(case)[0]}, {"type": "text", "text": "x"}]}
    ]
    with pytest.raises(InvalidInputError, match="give each image once"):
        vlm.generate(images(case), messages)
    with pytest.raises(InvalidInputError, match="Unknown content part"):
        vlm.generate(None, [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}])
    with pytest.raises(InvalidInputError, match="empty"):
        vlm.generate(None, "")
    with pytest.raises(InvalidInputError, match="cannot be decoded"):
        vlm.generate(b"not an image", "Describe.")
    with pytest.raises(PromptTooLongError, match="context"):
        vlm.generate(images(case) * 16, "x", max_new_tokens=4)
    with pytest.raises(ConfigurationError, match="Unknown generation option"):
        vlm.generate(images(case), "x", max_tokens=3)
    with pytest.raises(InvalidInputError, match=r"refers to image 2 \(<\|image_2\|>\)"):
        model(PHI3V).generate(FIXTURES / PHI3V_CASES["one-image"]["images"][0], "<|image_2|>\nAnd this?")


def test_text_only_model_and_unsupported_folders(tmp_path):
    with pytest.raises(UnsupportedModelError, match="text-only model.*Use OnnxTextGenerator"):
        VisionLanguageModel.builder().model_path(MODELS / "llama").build()
    with pytest.raises(UnsupportedModelError, match="without vision and embedding sessions.*OnnxTextGenerator"):
        VisionLanguageModel.builder().model_path(MODELS / "genai-llama").build()
    partial = tmp_path / "partial"
    shutil.copytree(LLAVA, partial)
    (partial / "onnx" / "embed_tokens.onnx").unlink()
    with pytest.raises(ModelFilesMissingError, match="not embed_tokens.onnx"):
        VisionLanguageModel.builder().model_path(partial).build()
    unsupported = tmp_path / "qwen2vl"
    shutil.copytree(LLAVA, unsupported)
    config = json.loads((unsupported / "preprocessor_config.json").read_text())
    config["image_processor_type"] = "Qwen2VLImageProcessor"
    (unsupported / "preprocessor_config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="Qwen2VLImageProcessor.*supported: CLIPImageProcessor"):
        VisionLanguageModel.builder().model_path(unsupported).build()


def test_exported_builder_repr_and_close():
    assert inference4py.VisionLanguageModel is VisionLanguageModel
    assert "VisionLanguageModel" in inference4py.__all__
    vlm = VisionLanguageModel.builder().model_path(LLAVA).max_new_tokens(3).build()
    assert "layout='optimum'" in repr(vlm) and "max_new_tokens=3" in repr(vlm)
    assert len(vlm.generate(images(CASES["other-image"]), "Hi").token_ids) == 3
    vlm.close()
    from inference4py.errors import GeneratorClosedError

    with pytest.raises(GeneratorClosedError):
        vlm.generate(None, "Hi")


def test_preset_records_the_model():
    b = VisionLanguageModel.phi3Vision()
    assert b._model_id == "inference4j/phi-3.5-vision-instruct"
    assert "phi3Vision" in repr(b.max_new_tokens(10)) and "max_new_tokens=10" in repr(b)


def test_image_parts_for_a_text_only_generator_name_the_vision_model():
    from inference4py import OnnxTextGenerator

    generator = OnnxTextGenerator.builder().model_path(MODELS / "llama").build()
    parts = [{"type": "image", "image": str(LLAVA / "images" / "sea.png")}, {"type": "text", "text": "What is it?"}]
    with pytest.raises(InvalidInputError, match="text-only model: it takes no images. Use VisionLanguageModel"):
        generator.generate([{"role": "user", "content": parts}], max_new_tokens=2)
    with pytest.raises(InvalidInputError, match="Use VisionLanguageModel"):
        generator.encode_prompt([{"role": "user", "content": [{"type": "image_url", "image_url": "http://x/y.png"}]}])


def test_render_prompt_takes_an_image_count_like_inference4py_genai():
    case = CASES["two-images"]
    assert model().render_prompt(case["text"], 2) == case["rendered"]
    assert model(PHI3V).render_prompt("Hi", 1) == PHI3V_CASES["one-image"]["rendered"].replace(
        "Describe this image.", "Hi"
    )


def test_hub_selects_the_vision_language_parts_and_the_processor_config():
    from inference4py.hub.files import select_model_files

    repo = [
        "README.md",
        "chat_template.json",
        "config.json",
        "preprocessor_config.json",
        "processor_config.json",
        "tokenizer.json",
        *(
            f"onnx/{part}{suffix}.onnx"
            for part in ("vision_encoder", "embed_tokens", "decoder_model_merged")
            for suffix in ("", "_fp16", "_q4")
        ),
    ]
    assert select_model_files(repo) == [
        "chat_template.json",
        "config.json",
        "onnx/decoder_model_merged.onnx",
        "onnx/embed_tokens.onnx",
        "onnx/vision_encoder.onnx",
        "preprocessor_config.json",
        "processor_config.json",
        "tokenizer.json",
    ]
    assert "onnx/vision_encoder_fp16.onnx" in select_model_files(repo, variant="fp16")
    genai = ["genai_config.json", "vision.onnx", "embedding.onnx", "model.onnx", "processor_config.json"]
    config = {
        "model": {
            "decoder": {"filename": "model.onnx"},
            "vision": {"filename": "vision.onnx"},
            "embedding": {"filename": "embedding.onnx"},
        }
    }
    assert select_model_files(genai, genai_config=config) == sorted(genai)


def test_phi3v_as_a_version_2_pipeline_on_the_engine_gives_the_same_ids(tmp_path):
    """The genai folder described as a JSON pipeline (vision init -> embedding step -> inputs_embeds decoder) runs
    on the engine's own DecoderRuntime with the images preprocessed here: the same ids, no model-specific code."""
    from inference4py.engine.decoder import DecoderRuntime
    from inference4py.engine.pipeline import load_pipeline
    from inference4py.generation.generate import collect, generate_chunks

    folder = tmp_path / "phi3v-described"
    shutil.copytree(PHI3V, folder)
    decoder = json.loads((PHI3V / "genai_config.json").read_text())["model"]["decoder"]
    description = {
        "version": 2,
        "pipeline": {
            "sessions": {n: {"file": f} for n, f in (("vision", "vision.onnx"), ("embedding", "embedding.onnx"))}
            | {"decoder": {"file": decoder["filename"]}},
            "flow": [
                {"run": "vision", "when": "init", "loop": "batched"},
                {"run": "embedding", "when": "step"},
                {"run": "decoder", "when": "step"},
            ],
            "dataflow": [
                {"from": "vision.image_features", "to": "embedding.image_features"},
                {"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"},
            ],
            "state": {"kv_cache": {"num_kv_heads": decoder["num_key_value_heads"], "head_size": decoder["head_size"]}},
        },
    }
    (folder / "inference4py.json").write_text(json.dumps(description))
    runtime = DecoderRuntime(load_pipeline(folder), {})
    assert runtime.flow is not None and runtime.flow.caller_inputs == ("vision.pixel_values", "vision.image_sizes")
    native = model(PHI3V)
    for case in PHI3V_CASES.values():
        ids, batch = native.encode(case["text"], [FIXTURES / p for p in case["images"]])
        state = runtime.new_state(1, capacity=len(ids) + case["max_new_tokens"])
        if batch.tokens:
            state.set_inputs({f"vision.{k}": v for k, v in batch.inputs.items()})
        config = native.generation_config.replace(max_new_tokens=case["max_new_tokens"])
        result = collect(generate_chunks(state, ids, config, native.tokenizer), prompt_tokens=len(ids), started=0.0)
        assert list(result.token_ids) == case["output_ids"], case["name"]
