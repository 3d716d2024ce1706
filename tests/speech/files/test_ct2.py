"""faster-whisper's CTranslate2 folders, converted without torch, against transformers on the file's own numbers.

The fixtures are folders written by CTranslate2's own converter (tools/fixtures/whisper_files.py) from
the tiny Whisper fixture (float32, float16, int8) and from two random models of large-v3-turbo's
shape (128 mel bins, 4 decoder layers, v3's extra language) and distil-whisper's (2 decoder layers,
6 heads, English-only); the references are transformers' generate() on weights equal to the numbers
each file holds.
"""

from __future__ import annotations

import functools
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

from inference4py import WhisperSpeechModel  # noqa: E402
from inference4py.audio import SAMPLE_RATE, load_audio  # noqa: E402
from inference4py.cli import main  # noqa: E402
from inference4py.errors import ConfigurationError, ModelLoadError, ModelNotFoundError, UnsupportedModelError  # noqa: E402
from inference4py.serve.loading import load_model, scan_models_dir  # noqa: E402
from inference4py.speech.files import convert_whisper, whisper_folder  # noqa: E402
from inference4py.speech.files.ct2 import read_ct2, whisper_weights  # noqa: E402
from inference4py.tasks.kinds import model_kind  # noqa: E402
from tests.conftest import FIXTURES, load_reference  # noqa: E402
from tests.gguf.test_sources import _install  # noqa: E402
from tests.speech.files.test_quantized import float_path  # noqa: E402

REF = load_reference("whisper_files")
VARIANTS = REF["variants"]
CT2 = [name for name, v in VARIANTS.items() if v["format"] == "ctranslate2"]


@functools.cache
def clips() -> dict[str, np.ndarray]:
    return {name: load_audio(FIXTURES / info["file"]) for name, info in load_reference("whisper")["clips"].items()}


def transcribe(model: WhisperSpeechModel, case: dict):
    s = case["settings"]
    return model.transcribe(
        (clips()[case["clip"]], SAMPLE_RATE),
        language=s.get("language"),
        task=s.get("task"),
        timestamps=s.get("return_timestamps", False),
        **{k: s[k] for k in ("max_new_tokens", "num_beams") if k in s},
    )


def converted(variant: str, tmp_path: Path) -> Path:
    """The converted folder of a variant; distil's toy vocabulary cannot say it is English-only (see below)."""
    folder = whisper_folder(FIXTURES / VARIANTS[variant]["path"])
    if VARIANTS[variant]["multilingual"]:
        return folder
    # A real English-only model says so by its vocabulary size (51,864; tiny.en in the real tier); this toy
    # vocabulary has the multilingual layout, so the test gives it the English-only generation config.
    copy = tmp_path / variant
    shutil.copytree(folder, copy)
    gen = {k: v for k, v in VARIANTS[variant]["generation_config"].items() if k != "transformers_version"}
    (copy / "generation_config.json").write_text(json.dumps(gen))
    return copy


@pytest.mark.parametrize("variant", CT2)
def test_ids_equal_transformers_on_the_files_numbers(variant, tmp_path):
    with float_path():  # the file's numbers in float32 (on the operators the activations are rounded: test_quantized)
        folder = converted(variant, tmp_path)
    with WhisperSpeechModel.builder().model_path(folder).build() as model:
        for case in VARIANTS[variant]["cases"]:
            result = transcribe(model, case)
            assert list(result.token_ids) == case["token_ids"], case["name"]
            assert result.text == case["text"], case["name"]


@pytest.mark.parametrize("variant", [v for v in CT2 if VARIANTS[v]["multilingual"]])
def test_generation_config_is_the_models_own(variant):
    """Special ids found by their text (turbo's shift by one included), suppress lists and heads from the file."""
    folder = whisper_folder(FIXTURES / VARIANTS[variant]["path"])
    ours = json.loads((folder / "generation_config.json").read_text())
    theirs = {k: v for k, v in VARIANTS[variant]["generation_config"].items() if k != "transformers_version"}
    assert ours == theirs
    config = json.loads((folder / "config.json").read_text())
    dims = VARIANTS[variant]["dims"]
    assert {k: config[k] for k in dims} == dims


def test_the_builder_the_cli_and_the_server_take_the_folder_itself(capsys, tmp_path):
    source = FIXTURES / VARIANTS["ct2-float16"]["path"]
    case = VARIANTS["ct2-float16"]["cases"][0]
    with WhisperSpeechModel.builder().model_path(source).build() as model:  # converted on the way, once
        assert list(transcribe(model, case).token_ids) == case["token_ids"]
    assert model_kind(str(source)).kind == "speech"
    loaded = load_model(str(source))
    assert isinstance(loaded, WhisperSpeechModel)
    loaded.close()
    clip = FIXTURES / load_reference("whisper")["clips"][case["clip"]]["file"]
    args = ["transcribe", "--model", str(source), "--language", "en", "--max-new-tokens", "24", str(clip)]
    assert main(args) == 0
    assert case["text"].strip() in capsys.readouterr().out
    out = tmp_path / "converted"
    assert main(["convert", str(source), str(out)]) == 0
    assert (out / "encoder_model.onnx").is_file() and (out / "decoder_model_merged.onnx").is_file()
    assert main(["convert", str(source), str(out), "--bits", "8"]) == 2  # --bits is a GGUF option
    assert "--bits applies to GGUF files" in capsys.readouterr().err
    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(source, models / "my-whisper")
    assert scan_models_dir(models) == {"my-whisper": (str(models / "my-whisper"), "speech")}


def test_a_conversion_is_cached_and_as_small_as_the_file():
    source = FIXTURES / VARIANTS["ct2-float16"]["path"]
    first = whisper_folder(source)
    stamp = (first / "decoder_model_merged.onnx").stat().st_mtime_ns
    assert whisper_folder(source) == first
    assert (first / "decoder_model_merged.onnx").stat().st_mtime_ns == stamp  # found, not rebuilt
    import onnx

    graph = onnx.load(str(first / "decoder_model_merged.onnx"), load_external_data=False).graph
    types = {t.name: t.data_type for t in graph.initializer}
    assert types["decoder.layers.0.attn.qkv.weight"] == onnx.TensorProto.FLOAT16  # as stored: widened at load
    assert types["decoder.embeddings"] == onnx.TensorProto.FLOAT16
    marker = json.loads((first / "inference4py-whisper.json").read_text())
    assert marker["format"] == "ct2" and marker["storage"] == ["float16"]


def test_a_split_pip_package_is_joined_and_converted(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    source = FIXTURES / VARIANTS["ct2-float16"]["path"]
    blob = (source / "model.bin").read_bytes()
    half = len(blob) // 2
    extra = {name: (source / name).read_bytes() for name in ("config.json", "tokenizer.json")}
    _install(
        site,
        "tiny-whisper-part1",
        "1.0",
        {"data/model.bin.part1": blob[:half], **{f"data/{k}": v for k, v in extra.items()}},
    )
    _install(site, "tiny-whisper-part2", "1.0", {"data/model.bin.part2": blob[half:]})
    assert model_kind("pip:tiny-whisper").kind == "speech"
    case = VARIANTS["ct2-float16"]["cases"][0]
    with WhisperSpeechModel.builder().model_path("pip:tiny-whisper").build() as model:
        assert list(transcribe(model, case).token_ids) == case["token_ids"]


def _damaged(tmp_path: Path, name: str, blob: bytes) -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / VARIANTS["ct2-float16"]["path"], folder)
    (folder / "model.bin").write_bytes(blob)
    return folder


def test_bad_files_are_clear_errors(tmp_path, capsys):
    blob = (FIXTURES / VARIANTS["ct2-float16"]["path"] / "model.bin").read_bytes()
    truncated = _damaged(tmp_path, "truncated", blob[: len(blob) // 2])
    with pytest.raises(ModelLoadError, match=r"model.bin is truncated: .* Copy or download the model folder again"):
        whisper_folder(truncated)
    assert main(["transcribe", "--model", str(truncated), str(FIXTURES / "references/whisper/tone.flac")]) == 2
    assert "truncated" in capsys.readouterr().err
    with pytest.raises(ModelLoadError, match=r"binary version .* does not look like a CTranslate2 model.bin"):
        whisper_folder(_damaged(tmp_path, "noise", bytes(range(256)) * 64))
    other = blob.replace(b"WhisperSpec", b"BertModSpec", 1)  # the same bytes, another model's spec
    with pytest.raises(UnsupportedModelError, match=r"holds a CTranslate2 BertModSpec, not a Whisper model"):
        whisper_folder(_damaged(tmp_path, "other", other))
    no_tokenizer = _damaged(tmp_path, "no-tokenizer", blob)
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match=r"has no tokenizer.json"):
        whisper_folder(no_tokenizer)
    with pytest.raises(ModelNotFoundError, match=r"does not exist"):
        whisper_folder(tmp_path / "nowhere")
    with pytest.raises(ConfigurationError, match=r"already exists"):
        convert_whisper(no_tokenizer.parent / "truncated", truncated)


def test_the_reader_keeps_the_stored_numbers():
    ct2 = read_ct2(FIXTURES / VARIANTS["ct2-int8"]["path"] / "model.bin")
    weights = whisper_weights(ct2)
    qkv = weights.matrix("decoder.layers.0.attn.qkv.weight")
    assert qkv.values.dtype == np.int8 and qkv.divisor is not None  # codes and per-row scales, as stored
    stored = ct2.variables["decoder/layer_0/self_attention/linear_0/weight"]
    scale = ct2.variables["decoder/layer_0/self_attention/linear_0/weight_scale"]
    np.testing.assert_array_equal(qkv.float32(), stored.astype(np.float32) / scale[:, None])


# --------------------------------------------------------------------------- whisper.cpp ggml files

GGML = [name for name, v in VARIANTS.items() if v["format"] == "ggml"]


def _with_fixture_settings(variant: str, tmp_path: Path) -> Path:
    """The converted ggml folder with the fixture's generation config: the fixture's suppress list adds its toy
    vocabulary's lone bytes, which no rule derives (on real vocabularies the derived list is OpenAI's: real tier)."""
    copy = tmp_path / variant
    shutil.copytree(whisper_folder(FIXTURES / VARIANTS[variant]["path"]), copy)
    (copy / "generation_config.json").write_text(json.dumps(VARIANTS[variant]["generation_config"]))
    return copy


@pytest.mark.parametrize("variant", GGML)
def test_ggml_ids_equal_transformers_on_the_files_numbers(variant, tmp_path):
    with float_path():  # the file's numbers in float32 (on the operators the activations are rounded: test_quantized)
        folder = _with_fixture_settings(variant, tmp_path)
    with WhisperSpeechModel.builder().model_path(folder).build() as model:
        for case in VARIANTS[variant]["cases"]:
            assert list(transcribe(model, case).token_ids) == case["token_ids"], case["name"]


def test_ggml_tokenizer_and_settings_come_from_the_file():
    from tokenizers import Tokenizer

    folder = whisper_folder(FIXTURES / VARIANTS["ggml-q8_0"]["path"])
    ours = Tokenizer.from_file(str(folder / "tokenizer.json"))
    theirs = Tokenizer.from_file(str(FIXTURES / "models/whisper/tokenizer.json"))
    for text in ("Hello world!", " The quick brown fox, café.", "  spaces\n\tand 12345", "<|en|><|0.00|>"):
        assert ours.encode(text, add_special_tokens=False).ids == theirs.encode(text, add_special_tokens=False).ids
    assert ours.get_vocab() == theirs.get_vocab()  # every text, special and timestamp token at its id
    gen = json.loads((folder / "generation_config.json").read_text())
    want = VARIANTS["ggml-q8_0"]["generation_config"]
    for key in ("lang_to_id", "task_to_id", "no_timestamps_token_id", "decoder_start_token_id", "is_multilingual"):
        assert gen[key] == want[key], key
    symbols = {theirs.token_to_id(c) for c in '"#()*+/:;<=>@[\\]^_`{|}~'} - {None}
    assert symbols | {want["decoder_start_token_id"]} <= set(
        gen["suppress_tokens"]
    )  # OpenAI's rule (the toy's own list adds lone bytes)
    marker = json.loads((folder / "inference4py-whisper.json").read_text())
    assert marker["format"] == "ggml" and marker["storage"] == ["F16", "F32", "Q8_0"]
    import onnx

    graph = onnx.load(str(folder / "decoder_model_merged.onnx"), load_external_data=False).graph
    types = {t.name: t.data_type for t in graph.initializer}
    from inference4py.engine.kernels import kernel_library

    # q8_0 blocks as stored, on the compiled operators; without them, codes with their scales beside
    blocks = onnx.TensorProto.UINT8 if kernel_library().available else onnx.TensorProto.INT8
    assert types["decoder.layers.0.fc1.weight"] == blocks


def test_bad_ggml_files_are_clear_errors(tmp_path):
    blob = (FIXTURES / VARIANTS["ggml-f16"]["path"]).read_bytes()
    cut = tmp_path / "ggml-cut.bin"
    cut.write_bytes(blob[: len(blob) - 1000])
    with pytest.raises(ModelLoadError, match=r"ggml-cut.bin is truncated: .* Download the ggml file again"):
        whisper_folder(cut)
    header = tmp_path / "ggml-header.bin"
    header.write_bytes(blob[:20])
    with pytest.raises(ModelLoadError, match=r"truncated"):
        whisper_folder(header)
    unknown = bytearray(blob)
    start = blob.index(b"encoder.positional_embedding") - 4 * 5  # n_dims, name length, type, ne0, ne1
    unknown[start + 8 : start + 12] = (19).to_bytes(4, "little")  # a ggml type this reader does not know
    odd = tmp_path / "ggml-odd.bin"
    odd.write_bytes(bytes(unknown))
    with pytest.raises(UnsupportedModelError, match=r"encoder.positional_embedding has ggml type 19"):
        whisper_folder(odd)
    not_ggml = tmp_path / "ggml-fake.bin"
    not_ggml.write_bytes(b"\0" * 4096)
    with pytest.raises(ModelNotFoundError, match=r"neither a whisper.cpp ggml file"):
        whisper_folder(not_ggml)


@pytest.mark.parametrize("ops", ["1", "0"])
def test_stacked_matrices_of_different_widths_are_a_clear_error(tmp_path, monkeypatch, ops):
    """A damaged file whose key and value rows are not the query's width, though q, k and v still add up to
    [3d, d] rows: a ModelLoadError naming them on either path, not numpy's / the block store's ValueError."""
    from inference4py.engine import kernels

    blob = bytearray((FIXTURES / VARIANTS["ggml-q8_0"]["path"]).read_bytes())
    d, row = 32, 34  # the fixture's width; a q8_0 block holds 32 values in 34 bytes

    def header(name: str) -> int:  # n_dims, name length, type, ne0, ne1, then the name
        return blob.index(name.encode()) - 4 * 5

    key, value = header("encoder.blocks.0.attn.key.weight"), header("encoder.blocks.0.attn.value.weight")
    blob[key + 12 : key + 20] = struct.pack("<2i", 2 * d, d // 2)  # [d/2, 2d]: the same bytes
    blob[value + 12 : value + 20] = struct.pack("<2i", 2 * d, 3 * d // 2)  # [3d/2, 2d]: three times the bytes
    data = value + 20 + len("encoder.blocks.0.attn.value.weight")
    blob[data : data + d * row] = bytes(blob[data : data + d * row]) * 3
    damaged = tmp_path / "ggml-widths.bin"
    damaged.write_bytes(bytes(blob))
    monkeypatch.setenv("INFERENCE4PY_GGML_OPS", ops)
    kernels._load.cache_clear()
    try:
        with pytest.raises(ModelLoadError, match=r"attn\.(query|key|value)\.weight .* Download the ggml file again"):
            convert_whisper(damaged, tmp_path / "out")
    finally:
        monkeypatch.undo()
        kernels._load.cache_clear()


def test_a_ggml_file_in_the_models_dir_is_served_by_its_name(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(FIXTURES / VARIANTS["ggml-f16"]["path"], models / "ggml-tiny.bin")
    (models / "notes.bin").write_bytes(b"not a model")
    assert scan_models_dir(models) == {"ggml-tiny": (str(models / "ggml-tiny.bin"), "speech")}
    assert model_kind(str(models / "ggml-tiny.bin")).kind == "speech"
