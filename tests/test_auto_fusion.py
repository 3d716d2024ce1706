"""Fast by default: an optimum export is fused on first load, cached by content, and checked before reuse."""

from __future__ import annotations

import json
import logging

import pytest

from inference4py import OnnxTextGenerator
from inference4py.optimize import folder as folder_module
from tests.conftest import FIXTURES

MODELS = FIXTURES / "models"
FUSABLE = ["llama", "llama-fp16", "llama-h16", "mistral", "phi3", "qwen2", "qwen2-h16", "qwen3"]
UNFUSABLE = ["gpt2", "gpt2-inference4j", "gemma", "llama-merged"]  # run as they are
PROMPTS = ["The quick brown fox", "one two three four one two three"]


def _ids(gen: OnnxTextGenerator) -> list[tuple[int, ...]]:
    return [tuple(gen.generate(p, max_new_tokens=12, do_sample=False).token_ids) for p in PROMPTS]


def _entries(cache):
    root = cache / "fused"
    return sorted(p for p in root.iterdir() if (p / ".inference4py-fused").is_file()) if root.is_dir() else []


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("name", FUSABLE)
def test_the_default_load_runs_the_fused_copy_with_the_exports_ids(name, cache):
    with OnnxTextGenerator.builder().model_path(MODELS / name).fuse_attention(False).build() as plain:
        want = _ids(plain)
        assert not plain._runtime.shared_kv
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen:
        assert gen._runtime.shared_kv, "the default load did not fuse"
        assert _entries(cache) == [gen.folder]
        assert _ids(gen) == want


@pytest.mark.parametrize("name", UNFUSABLE)
def test_a_graph_the_optimizer_does_not_recognise_runs_as_it_is_and_the_refusal_is_remembered(
    name, cache, monkeypatch, caplog
):
    with (
        caplog.at_level(logging.INFO, logger="inference4py.optimize"),
        OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen,
    ):
        assert gen.folder == MODELS / name
    assert any("unfused" in r.message for r in caplog.records)

    def never(*args, **kwargs):
        raise AssertionError("the refusal was not remembered")

    monkeypatch.setattr(folder_module, "optimize_folder", never)
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as again:
        assert again.folder == MODELS / name
    assert _entries(cache) == []


def _fuse_once(cache):
    with OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen:
        return gen.folder, _ids(gen)


def test_a_cached_copy_is_reused_without_fusing_again(cache, monkeypatch):
    first, want = _fuse_once(cache)

    def never(*args, **kwargs):
        raise AssertionError("fused again")

    monkeypatch.setattr(folder_module, "optimize_folder", never)
    with OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen:
        assert gen.folder == first
        assert _ids(gen) == want


@pytest.mark.parametrize("damage", ["truncated", "flipped", "missing", "foreign", "marker"])
def test_a_corrupt_or_foreign_cache_entry_is_rebuilt_not_trusted(damage, cache, caplog):
    first, want = _fuse_once(cache)
    graph = first / "model.onnx"
    data = graph.read_bytes()
    if damage == "truncated":
        graph.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":  # same size, one byte changed
        i = len(data) // 2
        graph.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])
    elif damage == "missing":
        graph.unlink()
    elif damage == "foreign":  # another model's fused copy under this model's key
        with OnnxTextGenerator.builder().model_path(MODELS / "llama").build() as other:
            other_graph = (other.folder / "model.onnx").read_bytes()
        graph.write_bytes(other_graph)
    else:
        marker = first / ".inference4py-fused"
        info = json.loads(marker.read_text())
        info["source_sha256"] = "0" * 64
        marker.write_text(json.dumps(info))
    with (
        caplog.at_level(logging.WARNING, logger="inference4py.optimize"),
        OnnxTextGenerator.builder().model_path(MODELS / "qwen2").build() as gen,
    ):
        assert gen.folder == first
        assert _ids(gen) == want
    assert any("rebuilding" in r.message for r in caplog.records)
    assert (first / "model.onnx").read_bytes() == data


def test_an_edited_source_gets_a_new_copy(cache, tmp_path):
    import shutil

    source = tmp_path / "qwen2"
    shutil.copytree(MODELS / "qwen2", source)
    with OnnxTextGenerator.builder().model_path(source).build() as gen:
        first = gen.folder
    config = json.loads((source / "config.json").read_text())
    config["rms_norm_eps"] = config.get("rms_norm_eps", 1e-6) * 10
    (source / "config.json").write_text(json.dumps(config))
    with OnnxTextGenerator.builder().model_path(source).build() as gen:
        assert gen.folder != first
    assert len(_entries(cache)) == 2


@pytest.mark.parametrize("name", ["qwen2", "genai-llama"])
def test_any_edited_or_added_file_gets_a_new_copy_that_carries_it(name, cache, tmp_path):
    """The copy carries every file of the folder: a new chat template or an added file must reach it."""
    import shutil

    source = tmp_path / name
    shutil.copytree(MODELS / name, source)
    template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
    messages = [{"role": "user", "content": "hi"}]
    with OnnxTextGenerator.builder().model_path(source).build() as gen:
        first = gen.folder
    (source / "chat_template.jinja").write_text(template)
    (source / "notes.txt").write_text("added after the first load")
    with OnnxTextGenerator.builder().model_path(source).build() as gen:
        assert gen.folder not in (first, source)
        assert (gen.folder / "notes.txt").read_text() == "added after the first load"
        assert gen.tokenizer.decode(gen.encode_prompt(messages)).endswith("<user>hi<assistant>")
    assert len(_entries(cache)) == 2


# --------------------------------------------------------------------------- genai folders: the head sliced

GENAI = ["genai-llama", "genai-qwen2", "genai-llama-int4", "genai-gemma3-int4"]


def _graph_inputs(folder):
    import onnx

    return [i.name for i in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.input]


@pytest.mark.parametrize("name", GENAI)
def test_a_genai_folder_loads_with_its_head_sliced_and_the_same_ids(name, cache):
    prompts = [*PROMPTS, "a", "to be"]  # one- and two-token prompts too: the sliced head's edge cases
    with OnnxTextGenerator.builder().model_path(MODELS / name).fuse_attention(False).build() as plain:
        assert "num_logits_to_keep" not in _graph_inputs(plain.folder)
        want = [tuple(plain.generate(p, max_new_tokens=12, do_sample=False).token_ids) for p in prompts]
        want_batch = [tuple(r.token_ids) for r in plain.generate_batch(prompts, max_new_tokens=6)]
    with OnnxTextGenerator.builder().model_path(MODELS / name).build() as gen:
        assert gen.folder != MODELS / name and _entries(cache) == [gen.folder]
        assert "num_logits_to_keep" in _graph_inputs(gen.folder)
        assert [tuple(gen.generate(p, max_new_tokens=12, do_sample=False).token_ids) for p in prompts] == want
        assert [tuple(r.token_ids) for r in gen.generate_batch(prompts, max_new_tokens=6)] == want_batch
        # the weights are the source's file, linked, not a second copy
        assert (gen.folder / "model.onnx.data").stat().st_ino == (MODELS / name / "model.onnx.data").stat().st_ino


@pytest.mark.parametrize("name", ["genai-llama", "genai-llama-int4"])
def test_the_sliced_head_gives_the_last_positions_logits_bit_for_bit(name, cache):
    """A 4-bit head keeps two rows (a one-row MatMulNBits takes another kernel); a float head one."""
    import numpy as np
    import onnxruntime as ort

    from inference4py.optimize import sliced_genai_folder

    sliced = sliced_genai_folder(MODELS / name)
    config = json.loads((MODELS / name / "genai_config.json").read_text())["model"]["decoder"]
    n = 7

    def run(folder, keep=None):
        session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
        feeds = {"input_ids": np.arange(5, 5 + n, dtype=np.int64)[None], "attention_mask": np.ones((1, n), np.int64)}
        for i in session.get_inputs():
            if i.name.startswith("past_key_values"):
                feeds[i.name] = np.zeros((1, config["num_key_value_heads"], 0, config["head_size"]), np.float32)
            elif i.name == "position_ids":
                feeds[i.name] = np.arange(n, dtype=np.int64)[None]
        if keep is not None:
            feeds["num_logits_to_keep"] = np.array(keep, np.int64)
        return session.run(["logits"], feeds)[0]

    full = run(MODELS / name)
    last = run(sliced, keep=1)
    rows = 2 if name.endswith("int4") else 1
    assert last.shape == (1, rows, full.shape[-1])
    assert np.array_equal(last[:, -1], full[:, -1])
    assert np.array_equal(run(sliced, keep=0), full)


def test_a_genai_folder_whose_head_is_not_a_matmul_runs_as_it_is(cache, tmp_path, caplog):
    import shutil

    import onnx

    source = tmp_path / "genai-llama"
    shutil.copytree(MODELS / "genai-llama", source)
    model = onnx.load(str(source / "model.onnx"), load_external_data=False)
    head = next(n for n in model.graph.node if "logits" in n.output)
    head.output[0] = "head_out"
    model.graph.node.append(onnx.helper.make_node("Identity", ["head_out"], ["logits"]))
    onnx.save(model, str(source / "model.onnx"))
    with (
        caplog.at_level(logging.INFO, logger="inference4py.optimize"),
        OnnxTextGenerator.builder().model_path(source).build() as gen,
    ):
        assert gen.folder == source
        assert gen.generate("The quick brown fox", max_new_tokens=4).generated_tokens == 4
    assert any("as it is" in r.message for r in caplog.records)
    assert _entries(cache) == []
