"""Real GGUF files converted by inference4py.gguf.graph, against transformers on the same files.

The real-checkpoint cache (tests/real/conftest.py) holds ``gguf/<model>.gguf`` (SmolLM2-135M-Instruct:
llama, Q4_1 + Q8_0; Qwen2.5-Coder-0.5B-Instruct: qwen2, Q4_K/Q5_0/Q6_K/Q8_0; Gemma 3 270M: gemma3,
Q4_K/Q5_0/Q6_K/Q8_0) and ``references/<model>.json``: transformers' greedy ids on those very files
(tools/real/llm.py loads them with ``from_pretrained(gguf_file=...)``, dequantized to float32).

Each file is converted with ``write_decoder`` into a folder (model.onnx + external data, config.json,
and the tokenizer files of the cache's ``<model>-hf`` folder) and run through the library's load path:

* ``bits=32``: greedy ids equal the reference, with the real tier's near-tie rule (when ids first
  differ at a step whose recorded top-1/top-2 margin is below FP32_TIE, only the steps before it count);
* the default (``bits=None``, every weight as the file holds it) with float32 activations
  (MatMulNBits at accuracy level 0): the same, since its weights are the file's;
* the default as converted (int8 activations) and ``bits=4`` (re-rounded): the share of reference
  steps agreeing before the first difference is recorded (the instruction models must still answer
  "Paris").
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from inference4py import OnnxTextGenerator
from tests.real.conftest import REAL, not_built, read_json

pytestmark = pytest.mark.real

onnx = pytest.importorskip("onnx")
pytest.importorskip("gguf")

MODELS = ("smollm2", "qwen2.5-coder", "gemma3")
FP32_TIE = 1e-3
REFERENCES: dict[str, Any] = {m: read_json(REAL / "references" / f"{m}.json") for m in MODELS}
_folders: dict[tuple[str, int | str | None], Path] = {}
_generators: dict[tuple[str, int | str | None], OnnxTextGenerator] = {}
FLOAT_ACTIVATIONS = "file-f32act"  # the default width with MatMulNBits at accuracy level 0


def _convert(model: str, bits: int | str | None, root: Path) -> Path:
    from inference4py.gguf.graph import write_decoder
    from inference4py.gguf.reader import GGUFFile

    source = REAL / "gguf" / f"{model}.gguf"
    hf = REAL / f"{model}-hf"
    if not source.is_file() or not hf.is_dir() or REFERENCES[model] is None:
        not_built(f"GGUF file, HF folder and references of {model}", only="llm")
    folder = root / f"{model}-{bits}"
    started = time.perf_counter()
    folder.mkdir(parents=True)
    config = write_decoder(GGUFFile(source), folder, None if bits == FLOAT_ACTIVATIONS else bits)  # type: ignore[arg-type]
    if bits == FLOAT_ACTIVATIONS:
        from tests.gguf.test_graph import set_float_activations

        set_float_activations(folder)
    built = time.perf_counter()
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for item in hf.iterdir():  # tokenizer, chat template, generation config
        if item.is_file() and item.suffix != ".safetensors" and item.name != "config.json":
            shutil.copy(item, folder / item.name)
    print(f"{model} bits={bits}: written in {built - started:.1f} s")
    return folder


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    def get(model: str, bits: int | str | None) -> OnnxTextGenerator:
        key = (model, bits)
        if key not in _generators:
            for other in list(_generators):  # one converted model in memory at a time
                _generators.pop(other).close()
            folder = _folders.get(key) or _convert(model, bits, tmp_path_factory.mktemp("gguf"))
            _folders[key] = folder
            started = time.perf_counter()
            _generators[key] = OnnxTextGenerator.builder().model_path(folder).build()
            print(f"{model} bits={bits}: loaded in {time.perf_counter() - started:.1f} s")
        return _generators[key]

    yield get
    for gen in _generators.values():
        gen.close()
    _generators.clear()


def _cases(model: str) -> list[dict[str, Any]]:
    ref = REFERENCES[model]
    return ref["cases"] if ref else []


def _params(bits: int | str | None):
    for model in MODELS:
        for case in _cases(model):
            yield pytest.param(model, bits, case, id=f"{model}-{bits}-{case['name']}")


def _first_difference(got: list[int], want: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


@pytest.mark.parametrize("model,bits,case", list(_params(32)) + list(_params(FLOAT_ACTIVATIONS)))
def test_exact_weights_equal_transformers_on_the_gguf(generator, model, bits, case):
    gen = generator(model, bits)
    got = list(gen.generate(case["prompt_ids"], max_new_tokens=case["max_new_tokens"], do_sample=False).token_ids)
    want = case["output_ids"]
    if got == want:
        return
    step = _first_difference(got, want)
    margin = case["margins"][step] if step < len(case["margins"]) else None
    assert margin is not None and margin < FP32_TIE, (
        f"{model} {case['name']}: step {step} gives {got[step : step + 1]} instead of {want[step : step + 1]} "
        f"(reference margin {margin})"
    )


@pytest.mark.parametrize("bits", [None, 4])
@pytest.mark.parametrize("model", MODELS)
def test_the_default_and_int4_answer_and_their_agreement_is_recorded(generator, model, bits, record_property):
    gen = generator(model, bits)
    agree = total = 0
    for case in _cases(model):
        got = list(gen.generate(case["prompt_ids"], max_new_tokens=case["max_new_tokens"], do_sample=False).token_ids)
        agree += _first_difference(got, case["output_ids"])
        total += len(case["output_ids"])
    rate = agree / total
    record_property(f"agreement_with_fp32_reference_bits_{bits}", round(rate, 3))
    print(f"{model} bits={bits}: {rate:.1%} of the reference steps agree before the first difference")
    if model != "gemma3":  # the pretrained Gemma 3 270M does not answer chat turns
        answer = gen.generate([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=24)
        assert "Paris" in answer.text
