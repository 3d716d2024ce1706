"""Fast by default on real checkpoints: loading an optimum export runs its fused copy, with the export's ids."""

from __future__ import annotations

import pytest

from inference4py import OnnxTextGenerator
from tests.real.conftest import REAL, not_built

pytestmark = pytest.mark.real

QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea."]


@pytest.mark.parametrize("layout", ["smollm2-optimum", "qwen2.5-coder-optimum"])
def test_the_default_load_of_an_optimum_export_is_fused_and_gives_the_exports_ids(layout):
    folder = REAL / layout
    if not folder.is_dir():
        not_built(layout, "llm")
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS]
    with OnnxTextGenerator.builder().model_path(folder).fuse_attention(False).build() as plain:
        want = [plain.generate(p, max_new_tokens=32, do_sample=False).token_ids for p in prompts]
    with OnnxTextGenerator.builder().model_path(folder).build() as gen:
        assert gen.folder != folder and gen._runtime.shared_kv
        got = [gen.generate(p, max_new_tokens=32, do_sample=False).token_ids for p in prompts]
    assert got == want
