"""A GGUF file to a model folder, end to end: the cache, the builder, the CLI, the Hub and bad files.

The tiny model GGUFs carry weights and no vocabulary, the tokenizer GGUFs the reverse; a test
file joins one of each (same vocabulary size) into a complete llama.cpp file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("onnx")

from inference4py import OnnxTextGenerator, converted  # noqa: E402
from inference4py.cli import main  # noqa: E402
from inference4py.errors import ConfigurationError, ModelLoadError, UnsupportedModelError  # noqa: E402
from inference4py.gguf import convert as convert_module  # noqa: E402
from inference4py.gguf.convert import convert_gguf, gguf_folder  # noqa: E402
from inference4py.gguf.reader import GGUFFile  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

GGUF_DIR = FIXTURES / "gguf"
REF = json.loads((GGUF_DIR / "graph-references.json").read_text(encoding="utf-8"))["models"]


def _kind(value: Any) -> tuple[Any, Any]:
    t = gguf.GGUFValueType
    if isinstance(value, bool):
        return t.BOOL, None
    if isinstance(value, int):
        return t.INT64 if value > 2**31 - 1 else t.INT32, None
    if isinstance(value, float):
        return t.FLOAT32, None
    if isinstance(value, str):
        return t.STRING, None
    first = value[0] if value else ""
    return t.ARRAY, _kind(first)[0]


def write_gguf(path: Path, model: str, tokenizer: str, *, architecture: str | None = None) -> Path:
    """``model``'s weights and metadata with ``tokenizer``'s vocabulary, as one F32 GGUF file."""
    weights, vocab = GGUFFile(GGUF_DIR / model), GGUFFile(GGUF_DIR / tokenizer)
    writer = gguf.GGUFWriter(str(path), architecture or weights.architecture)
    merged = {**weights.metadata, **{k: v for k, v in vocab.metadata.items() if k.startswith("tokenizer.")}}
    for key, value in merged.items():
        if key == "general.architecture":
            continue
        kind, sub = _kind(value)
        writer.add_key_value(key, value, kind, sub_type=sub)
    for info in weights.tensors():
        writer.add_tensor(info.name, np.ascontiguousarray(weights.tensor(info.name), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture()
def llama_gguf(tmp_path) -> Path:
    return write_gguf(tmp_path / "tiny-llama.gguf", "model-llama-F32.gguf", "tokenizer-llama.gguf")


def _reference(name: str) -> dict[str, Any]:
    return REF[name]["cases"][0]


def test_a_converted_file_runs_through_the_builder_and_equals_transformers(llama_gguf, cache):
    case = _reference("model-llama-F32.gguf")
    with OnnxTextGenerator.builder().model_path(llama_gguf).gguf_bits(32).build() as model:
        result = model.generate(case["prompt_ids"], max_new_tokens=case["max_new_tokens"], do_sample=False)
        assert list(result.token_ids) == case["output_ids"][: len(result.token_ids)]
        assert len(result.token_ids) == len(case["output_ids"]) or result.finish_reason == "eos"
        assert model.tokenizer.decode(model.tokenizer.encode("hello world")) == "hello world"
    entries = list((cache / "gguf").iterdir())
    assert len(entries) == 1 and entries[0].name.endswith("-32bit")
    assert json.loads((entries[0] / "inference4py-gguf.json").read_text())["architecture"] == "llama"


def test_the_cache_is_reused_and_a_damaged_entry_is_rebuilt(llama_gguf, cache):
    first = gguf_folder(llama_gguf, bits=32)
    stamp = (first / "model.onnx").stat().st_mtime_ns
    assert gguf_folder(llama_gguf, bits=32) == first and (first / "model.onnx").stat().st_mtime_ns == stamp
    with pytest.MonkeyPatch.context() as patch:  # a cached entry is found from the file's hash alone
        patch.setattr(convert_module, "GGUFFile", None)
        assert gguf_folder(llama_gguf, bits=32) == first
    (first / "inference4py-gguf.json").unlink()  # as if a conversion was cut short by an older version
    (first / "model.onnx").write_bytes(b"garbage")
    again = gguf_folder(llama_gguf, bits=32)
    assert again == first and (again / "inference4py-gguf.json").is_file()
    OnnxTextGenerator.builder().model_path(again).build().close()  # the rebuilt graph loads


def test_an_interrupted_conversion_leaves_nothing_behind(llama_gguf, cache, monkeypatch):
    real_dump = convert_module._dump

    def interrupted(path: Path, content: Any) -> None:
        if path.name == "generation_config.json":  # the graph is written already: Ctrl-C mid-way
            raise KeyboardInterrupt
        real_dump(path, content)

    monkeypatch.setattr(convert_module, "_dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gguf_folder(llama_gguf, bits=32)
    assert list((cache / "gguf").iterdir()) == []  # no folder, no temporary one
    monkeypatch.setattr(convert_module, "_dump", real_dump)
    assert (gguf_folder(llama_gguf, bits=32) / "inference4py-gguf.json").is_file()


def test_too_little_disk_is_a_clear_error_before_anything_is_written(llama_gguf, cache, monkeypatch, capsys):
    import shutil

    real = shutil.disk_usage

    def full(path: Any) -> Any:
        usage = real(path)
        return type(usage)(usage.total, usage.total - 1000, 1000)  # 1000 bytes free

    monkeypatch.setattr(convert_module.shutil, "disk_usage", full)
    with pytest.raises(ConfigurationError, match=r"Not enough free disk .* needs about .* GB and .* GB free"):
        gguf_folder(llama_gguf)
    assert not (cache / "gguf").exists() or not any((cache / "gguf").iterdir())
    assert main(["convert", str(llama_gguf), str(cache / "out")]) == 2  # the CLI: a message, no traceback
    assert "Not enough free disk" in capsys.readouterr().err and not (cache / "out").exists()


def test_a_cached_conversion_is_found_without_reading_the_file_again(llama_gguf, cache, monkeypatch):
    first = gguf_folder(llama_gguf)

    def unread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the file was read again")

    monkeypatch.setattr(converted, "open", unread, raising=False)  # the digest's only read of the file
    monkeypatch.setattr(convert_module, "GGUFFile", None)  # nor parsed
    assert gguf_folder(llama_gguf) == first
    os.utime(llama_gguf, ns=(1, 1))  # a changed file (its mtime) is hashed again
    with pytest.raises(AssertionError, match="read again"):
        gguf_folder(llama_gguf)


def test_a_killed_conversions_leftovers_are_removed_by_the_next_one(llama_gguf, cache):
    first = gguf_folder(llama_gguf)
    import shutil

    shutil.rmtree(first)
    killed = first.parent / f".{first.name}.abc123"  # as mkdtemp names it; SIGKILL left it
    killed.mkdir()
    (killed / "model.onnx.data").write_bytes(b"\0" * 1000)
    old = time.time() - 7 * 3600
    os.utime(killed / "model.onnx.data", (old, old))
    os.utime(killed, (old, old))
    recent = first.parent / f".{first.name}.def456"  # another process converting right now: kept
    recent.mkdir()
    assert gguf_folder(llama_gguf) == first
    assert not killed.exists() and recent.exists()


def test_convert_writes_a_shareable_folder_and_refuses_to_overwrite(llama_gguf, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", str(llama_gguf), str(out), "--bits", "16"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert oct(out.stat().st_mode & 0o777) != oct(0o700)  # not mkdtemp's private mode
    assert json.loads((out / "inference4py-gguf.json").read_text())["bits"] == 16
    assert main(["convert", str(llama_gguf), str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    with pytest.raises(ConfigurationError, match="already exists"):
        convert_gguf(llama_gguf, out)


def test_a_truncated_file_is_a_clear_error_and_caches_nothing(llama_gguf, cache, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(llama_gguf.read_bytes()[: llama_gguf.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="truncated"):
        gguf_folder(cut)
    assert not (cache / "gguf").exists() or not any((cache / "gguf").iterdir())


def test_an_unsupported_architecture_lists_the_supported_ones(tmp_path, cache):
    odd = write_gguf(tmp_path / "odd.gguf", "model-llama-F32.gguf", "tokenizer-llama.gguf", architecture="mamba")
    with pytest.raises(UnsupportedModelError, match=r"llama.*qwen2"):
        gguf_folder(odd)
    assert not (cache / "gguf").exists() or not any((cache / "gguf").iterdir())


def test_a_gguf_file_from_the_hub_cache_offline(llama_gguf, cache, tmp_path, monkeypatch):
    from tests.hubserver import populate_cache

    hub = tmp_path / "hf"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    populate_cache(hub, "org/tiny-GGUF", {"tiny-q8.gguf": llama_gguf.read_bytes(), "README.md": b"hi"})
    builder = OnnxTextGenerator.builder().model_id("org/tiny-GGUF").gguf_file("tiny-q8.gguf").gguf_bits(32)
    case = _reference("model-llama-F32.gguf")
    with builder.build() as model:
        ids = model.generate(case["prompt_ids"], max_new_tokens=5, do_sample=False).token_ids
    assert list(ids) == case["output_ids"][:5]
    from inference4py.errors import HubError

    with pytest.raises(HubError, match="not in the local Hugging Face cache"):
        OnnxTextGenerator.builder().model_id("org/tiny-GGUF").gguf_file("other.gguf").build()
    with pytest.raises(ConfigurationError, match="model_id"):
        OnnxTextGenerator.builder().gguf_file("tiny-q8.gguf").build()


def test_a_load_without_a_width_reuses_the_default_conversion_only(llama_gguf, cache, monkeypatch):
    default = gguf_folder(llama_gguf)  # as the file holds it
    explicit16 = gguf_folder(llama_gguf, bits=16)
    assert default.name.endswith(("-file", "-file-ggml")) and explicit16.name.endswith("-16bit")
    monkeypatch.setattr(convert_module, "GGUFFile", None)  # both answered from the cache, nothing parsed
    assert gguf_folder(llama_gguf) == default and gguf_folder(llama_gguf, bits=16) == explicit16


@pytest.mark.parametrize(
    "name,ops,embedding",
    [
        ("model-llama-F32.gguf", {"MatMul"}, "Gather"),
        ("model-llama-F16.gguf", {"MatMul"}, "Gather"),
        ("model-llama-Q8_0.gguf", {"MatMulNBits"}, "Gather"),  # of the 8-bit blocks, scaled by their scales
    ],
)
def test_the_default_width_keeps_each_weight_as_the_file_holds_it(name, ops, embedding, tmp_path):
    import onnx

    from inference4py.gguf.graph import write_decoder

    folder = tmp_path
    write_decoder(GGUFFile(GGUF_DIR / name), folder)  # bits=None: the default
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    kinds = {n.op_type for n in graph.node}
    assert ops <= kinds and ({"MatMul", "MatMulNBits"} - ops).isdisjoint(
        {n.op_type for n in graph.node if "proj" in n.name}
    )
    assert graph.node[next(i for i, n in enumerate(graph.node) if "embed_tokens" in n.name)].op_type == embedding
    if "Q8_0" in name:  # 8 bits and a float32 scale per block of 32
        nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
        assert {next(a.i for a in n.attribute if a.name == "bits") for n in nbits} == {8}


def test_an_unsupported_tensor_type_names_the_supported_ones(tmp_path, cache):
    path = tmp_path / "iq2.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    kind = gguf.GGMLQuantizationType.IQ2_XXS
    block, size = gguf.GGML_QUANT_SIZES[kind]
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((4, 256 // block * size), dtype=np.uint8), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from inference4py.gguf.graph import Part, _Builder
    from inference4py.gguf.store import ExternalData

    builder = _Builder(GGUFFile(path), None, ExternalData(tmp_path))
    with pytest.raises(UnsupportedModelError, match=r"IQ2_XXS.*Q4_K.*Q6_K.*--bits 32.*gguf_bits\(32\)"):
        builder.linear("x", [Part("blk.0.attn_q.weight")], "q")
    builder.store.close()
    assert GGUFFile(path).tensor("blk.0.attn_q.weight").shape == (4, 256)  # a float width reads it
