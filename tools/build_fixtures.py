"""Rebuild the committed test fixtures (tiny random models + reference outputs).

    python tools/build_fixtures.py                 # every builder
    python tools/build_fixtures.py --only decoder  # one builder (repeatable)

Needs the heavy tools (``pip install -e . -r tools/requirements.txt``, in an environment of their
own: tools/README.md); the tests themselves do not.
Builds are deterministic: fixed seeds, corpus written in tools/fixtures/common.py.
To add a builder: write tools/fixtures/<name>.py with ``build(fixtures_dir)`` and
add one line to BUILDERS.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# name -> module exposing build(fixtures_dir: pathlib.Path) -> None
BUILDERS = {
    "decoder": "tools.fixtures.decoder",
    "processors": "tools.fixtures.processors",
    "seq2seq": "tools.fixtures.seq2seq",
    "beam": "tools.fixtures.beam",
    "control": "tools.fixtures.control",  # after decoder and seq2seq: reads their references
    "genai": "tools.fixtures.genai",  # onnxruntime-genai model builder (needs onnxruntime-genai, onnx_ir)
    "architectures": "tools.fixtures.architectures",  # phi3 / gemma / mistral / qwen3: zero-code architectures
    "whisper": "tools.fixtures.whisper",  # speech-seq2seq: tiny Whisper (transformers.js layout), clips, features
    "whisper_files": "tools.fixtures.whisper_files",  # CTranslate2 folders + ggml files of it (after whisper)
    "fused": "tools.fixtures.fused",  # head size 16 optimum exports for `inference4py optimize` (rotary fusion)
    "sliding": "tools.fixtures.sliding",
    "genai_moe": "tools.fixtures.genai_moe",  # genai-built gpt-oss: com.microsoft MoE (fp32) and QMoE (int4) folders  # genai-built Gemma-3-like / Mistral-like folders with a sliding window
    "tool_calls": "tools.fixtures.tool_calls",  # Qwen2.5's template rendered by transformers with tools= (text + ids)
    "logprobs": "tools.fixtures.logprobs",  # transformers' raw-logit log-probabilities (after decoder)
    "gguf_tokenizers": "tools.fixtures.gguf_tokenizers",
    "embedding": "tools.fixtures.embedding",  # tiny sentence-transformers BERT (onnx/model.onnx) + encode() vectors
    "reranker": "tools.fixtures.reranker",  # tiny one-label BERT cross-encoder (onnx/model.onnx) + transformers' logits
    "gguf_models": "tools.fixtures.gguf_models",  # tiny GGUF decoders (F32/F16/Q8_0) + transformers' greedy ids  # tokenizer-only GGUFs + transformers / llama.cpp refs
    "gguf_moe": "tools.fixtures.gguf_moe",  # tiny MoE GGUFs by llama.cpp's convert_hf_to_gguf.py + greedy/beam ids
    "gguf_mla": "tools.fixtures.gguf_mla",  # tiny DeepSeek-V2 (MLA + MoE) GGUFs by llama.cpp's converter + greedy/beam ids
    "vision_language": "tools.fixtures.vision_language",  # tiny LLaVA in vision_encoder / embed_tokens / decoder parts
    "vision_idefics3": "tools.fixtures.vision_idefics3",  # tiny Idefics3 (SmolVLM-style image splitting), same parts
    "pipelines": "tools.fixtures.pipelines",  # version-2 descriptions: llama split at embed_tokens, a final session (after decoder)
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BUILDERS),
        metavar="NAME",
        help=f"run only this builder (repeatable): {', '.join(BUILDERS)}",
    )
    parser.add_argument(
        "--fixtures-dir", type=Path, default=REPO / "tests" / "fixtures", help="output root (default: tests/fixtures)"
    )
    args = parser.parse_args(argv)

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    for name in args.only or list(BUILDERS):
        module_name = BUILDERS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            print(f"[{name}] skipped: {module_name} does not exist yet")
            continue
        start = time.perf_counter()
        print(f"[{name}] building into {args.fixtures_dir}")
        module.build(args.fixtures_dir)
        print(f"[{name}] done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
