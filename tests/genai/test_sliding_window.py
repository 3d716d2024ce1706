"""inference4py_genai.TextGenerator on sliding-window folders (issue 13).

onnxruntime-genai sizes a windowed KV cache from ``max_length`` and refuses one below the
window, so a short call (prompt + max_new_tokens < window) used to fail inside genai.  The
facade asks genai for at least the window and stops after max_new_tokens itself.  genai's
beam search cannot run these graphs at all: that is refused with a pointer to the native loop.
"""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES, load_reference
from tests.genai.conftest import require_genai

genai = require_genai()

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py_genai import TextGenerator  # noqa: E402

REF = load_reference("sliding")
_generators: dict[str, TextGenerator] = {}


def generator(name: str) -> TextGenerator:
    if name not in _generators:
        _generators[name] = TextGenerator.builder().model_path(FIXTURES / REF["models"][name]["folder"]).build()
    return _generators[name]


def cases():
    for name, model in REF["models"].items():
        for case in model["cases"]:
            if case["kind"] == "text":
                yield pytest.param(name, case, id=f"{name}-{case['name']}")


@pytest.mark.parametrize("name,case", list(cases()))
def test_greedy_ids_on_both_sides_of_the_window(name, case):
    result = generator(name).generate(case["prompt"], max_new_tokens=case["max_new_tokens"], do_sample=False)
    want = case["output_ids"][: case.get("stable_prefix", len(case["output_ids"]))]
    assert list(result.token_ids)[: len(want)] == want
    assert len(result.token_ids) == case["max_new_tokens"]  # no more tokens than asked, though genai had room
    assert result.finish_reason == "length"


def test_streaming_stops_at_max_new_tokens():
    case = next(c for c in REF["models"]["genai-gemma3"]["cases"] if c["name"] == "ascii")
    pieces = list(generator("genai-gemma3").stream(case["prompt"], max_new_tokens=5, do_sample=False))
    native = OnnxTextGenerator.builder().model_path(FIXTURES / "models" / "genai-gemma3").build()
    assert "".join(pieces) == native.generate(case["prompt"], max_new_tokens=5, do_sample=False).text


def test_beam_search_is_refused_with_the_fix():
    with pytest.raises(ConfigurationError, match="sliding-window.*OnnxTextGenerator"):
        generator("genai-mistral").generate("Hello", num_beams=4, max_new_tokens=4)
