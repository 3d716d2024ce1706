"""``serve --kv-cache int8``: the option reaches the settings, and the text generators load with an int8 cache."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("onnx")

from inference4py.errors import ConfigurationError  # noqa: E402
from inference4py.serve import ServerSettings, load_models  # noqa: E402
from tests.conftest import MODELS  # noqa: E402


def test_the_command_line_option_reaches_the_settings(monkeypatch):
    import inference4py.serve as serve_module
    from inference4py.cli.app import main

    calls = []
    monkeypatch.setattr(serve_module, "serve", lambda models, **kw: calls.append((models, kw)))
    assert main(["serve", "--model", str(MODELS / "genai-llama"), "--kv-cache", "int8"]) == 0
    assert main(["serve", "--model", str(MODELS / "genai-llama")]) == 0
    assert [kw["settings"].kv_cache for _, kw in calls] == ["int8", "float"]
    assert main(["serve", "--model", "a", "--model", "b", "--kv-cache", "b=int8"]) == 0
    assert calls[-1][1]["settings"].kv_cache_for("a") == "float"
    assert calls[-1][1]["settings"].kv_cache_for("b") == "int8"
    assert main(["serve", "--model", "x", "--kv-cache", "int4"]) == 2
    assert main(["serve", "--model", "x", "--kv-cache", "=int8"]) == 2
    with pytest.raises(ConfigurationError, match="kv_cache must be one of float, int8, got 'q4'"):
        ServerSettings(model_kv_cache={"x": "q4"})
    with pytest.raises(ConfigurationError, match="kv_cache must be one of float, int8"):
        ServerSettings(kv_cache="fp8")


def test_loaded_text_generators_keep_an_int8_cache():
    loaded = load_models([str(MODELS / "genai-llama")], kv_cache="int8")
    runtime = loaded["genai-llama"].runtime
    assert {np.dtype(e.dtype) for e in runtime.layout.self_entries} == {np.dtype(np.int8)}
    with pytest.raises(ConfigurationError, match="int8 KV needs a GroupQueryAttention graph"):
        load_models([str(MODELS / "gpt2")], kv_cache="int8")


def test_one_model_int8_beside_another_float():
    """--kv-cache NAME=int8: that model alone keeps an int8 cache; a name no model is served as is refused."""
    from inference4py.serve.registry import ModelRegistry

    settings = ServerSettings(model_kv_cache={"genai-llama": "int8"})
    loaded = load_models([str(MODELS / "genai-llama"), str(MODELS / "qwen2")], kv_cache=settings.kv_cache_for)
    dtypes = {name: {np.dtype(e.dtype) for e in m.runtime.layout.self_entries} for name, m in loaded.items()}
    assert dtypes == {"genai-llama": {np.dtype(np.int8)}, "qwen2": {np.dtype(np.float32)}}
    with pytest.raises(ConfigurationError, match="'lama', which no model is served as; served: genai-llama"):
        ModelRegistry({"genai-llama": loaded["genai-llama"]}, ServerSettings(model_kv_cache={"lama": "int8"}))
