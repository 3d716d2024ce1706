"""Real GGUF files converted by inference4py.gguf.graph, against transformers on the same files.

The real-checkpoint cache (tests/real/conftest.py) holds ``gguf/<model>.gguf`` (SmolLM2-135M-Instruct:
llama, Q4_1 + Q8_0; Qwen2.5-Coder-0.5B-Instruct: qwen2, Q4_K/Q5_0/Q6_K/Q8_0; Gemma 3 270M: gemma3,
Q4_K/Q5_0/Q6_K/Q8_0) and ``references/<model>.json``: transformers' greedy ids on those very files
(tools/real/llm.py loads them with ``from_pretrained(gguf_file=...)``, dequantized to float32).

Each file is converted with ``build_decoder`` into a folder (model.onnx + external data, config.json,
and the tokenizer files of the cache's ``<model>-hf`` folder) and run through the library's load path:

* ``bits=32``: greedy ids equal the reference, with the real tier's near-tie rule (when ids first
  differ at a step whose recorded top-1/top-2 margin is below FP32_TIE, only the steps before it count);
* ``bits=4``: the share of reference steps agreeing before the first difference is recorded (the
  instruction models must still answer "Paris").
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
_folders: dict[tuple[str, int], Path] = {}
_generators: dict[tuple[str, int], OnnxTextGenerator] = {}


def _convert(model: str, bits: int, root: Path) -> Path:
    from inference4py.gguf.graph import build_decoder
    from inference4py.gguf.reader import GGUFFile

    source = REAL / "gguf" / f"{model}.gguf"
    hf = REAL / f"{model}-hf"
    if not source.is_file() or not hf.is_dir() or REFERENCES[model] is None:
        not_built(f"GGUF file, HF folder and references of {model}", only="llm")
    folder = root / f"{model}-{bits}"
    started = time.perf_counter()
    graph, config = build_decoder(GGUFFile(source), bits)
    built = time.perf_counter()
    folder.mkdir(parents=True)
    onnx.save(graph, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    del graph
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for item in hf.iterdir():  # tokenizer, chat template, generation config
        if item.is_file() and item.suffix != ".safetensors" and item.name != "config.json":
            shutil.copy(item, folder / item.name)
    print(f"{model} bits={bits}: built in {built - started:.1f} s, saved in {time.perf_counter() - built:.1f} s")
    return folder


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    def get(model: str, bits: int) -> OnnxTextGenerator:
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


def _params(bits: int):
    for model in MODELS:
        for case in _cases(model):
            yield pytest.param(model, bits, case, id=f"{model}-{bits}-{case['name']}")


def _first_difference(got: list[int], want: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


@pytest.mark.parametrize("model,bits,case", list(_params(32)))
def test_bits32_conversion_equals_transformers_on_the_gguf(generator, model, bits, case):
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


@pytest.mark.parametrize("model", MODELS)
def test_bits4_conversion_answers_and_its_agreement_is_recorded(generator, model, record_property):
    gen = generator(model, 4)
    agree = total = 0
    for case in _cases(model):
        got = list(gen.generate(case["prompt_ids"], max_new_tokens=case["max_new_tokens"], do_sample=False).token_ids)
        agree += _first_difference(got, case["output_ids"])
        total += len(case["output_ids"])
    rate = agree / total
    record_property("int4_agreement_with_fp32_reference", round(rate, 3))
    print(f"{model} bits=4: {rate:.1%} of the reference steps agree before the first difference")
    if model != "gemma3":  # the pretrained Gemma 3 270M does not answer chat turns
        answer = gen.generate([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=24)
        assert "Paris" in answer.text
