"""Token-control options end to end against transformers, and user logits processors."""

from __future__ import annotations

import numpy as np
import pytest

from inference4py import BartSummarizer, FlanT5TextGenerator, OnnxTextGenerator
from tests.conftest import MODELS, load_reference

CONTROL = load_reference("control")["models"]
DEC = load_reference("decoder")["models"]
TASKS = {"gpt2": OnnxTextGenerator, "qwen2": OnnxTextGenerator, "bart": BartSummarizer, "t5": FlanT5TextGenerator}


def _cases():
    for name, model in CONTROL.items():
        for case in model["cases"]:
            yield pytest.param(name, case, id=f"{name}-{case['name']}")


@pytest.mark.parametrize("name,case", list(_cases()))
def test_control_option_matches_transformers(name, case):
    settings = {
        k: (tuple(tuple(s) for s in v) if k == "bad_words_ids" else tuple(v)) for k, v in case["settings"].items()
    }
    with TASKS[name].builder().model_path(MODELS / name).build() as task:
        source = case.get("prompt_ids") or case["input_ids"]
        result = task.generate(list(source), max_new_tokens=case["max_new_tokens"], do_sample=False, **settings)
    assert list(result.token_ids) == case["output_ids"]


def test_user_logits_processor_runs_after_the_builtin_ones_and_sees_the_sequence():
    case = DEC["gpt2"]["cases"][0]
    banned = case["output_ids"][0]
    seen: list[tuple[int, ...]] = []

    def ban_first(ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        seen.append(ids.shape)
        logits[:, banned] = -np.inf
        return logits

    with (
        OnnxTextGenerator.builder().model_path(MODELS / "gpt2").logits_processor(ban_first).max_new_tokens(6).build()
    ) as gen:
        result = gen.generate(case["prompt_ids"])
    n = len(case["prompt_ids"])
    assert seen == [(1, n + i) for i in range(6)]  # prompt + generated so far, every step
    assert banned not in result.token_ids
    # Equivalent to the built-in suppress_tokens processor:
    with OnnxTextGenerator.builder().model_path(MODELS / "gpt2").max_new_tokens(6).build() as gen:
        assert gen.generate(case["prompt_ids"], suppress_tokens=(banned,)).token_ids == result.token_ids
