"""Run onnxruntime-genai's model builder with in-process fixes for transformers 4.57.

Usage (same arguments as ``python -m onnxruntime_genai.models.builder``):

    python benchmarks/_genai_builder.py -i HF_FOLDER -o OUT -p fp32 -e cpu

onnxruntime-genai 0.18's builder targets transformers 5: it imports classes that
4.57 does not have (only used for multimodal models) and iterates over
``config.rope_scaling`` even when it is ``None`` (Llama configs without RoPE
scaling).  Both are patched here, in this process only; the installed package is
not modified.
"""

from __future__ import annotations

import runpy
import sys


def _patch_transformers() -> None:
    import transformers

    missing = [
        "Gemma3ForConditionalGeneration",
        "Lfm2VlForConditionalGeneration",
        "Mistral3ForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
    ]
    absent = []
    for name in missing:
        try:
            getattr(transformers, name)
        except (AttributeError, ImportError):
            absent.append(name)
    # Importing a model module may put a new lazy module in sys.modules: patch the current one.
    module = sys.modules["transformers"]
    for name in absent:
        # A placeholder class: only multimodal builders use these, never the text models we build.
        setattr(module, name, type(name, (), {}))


def _patch_builder() -> None:
    import onnxruntime_genai.models  # noqa: F401  (puts the builder's folder on sys.path)
    from builders import base  # type: ignore[import-not-found]

    original = base.Model.make_config_init

    def make_config_init(self, config):  # type: ignore[no-untyped-def]
        if getattr(config, "rope_scaling", 0) is None:
            # transformers 5 always has rope_parameters; 4.57 leaves rope_scaling None when there is no scaling.
            config.rope_scaling = {"rope_type": "default", "rope_theta": getattr(config, "rope_theta", 10000.0)}
        return original(self, config)

    base.Model.make_config_init = make_config_init


def main(argv: list[str]) -> None:
    _patch_transformers()
    _patch_builder()
    sys.argv = ["onnxruntime_genai.models.builder", *argv]
    runpy.run_module("builder", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
