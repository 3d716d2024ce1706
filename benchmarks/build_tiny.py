"""Torch weights and genai folders for the tiny decoder fixtures (transformers / genai rows).

    python benchmarks/build_tiny.py [--only llama,qwen2,gpt2]

The fixtures in tests/fixtures/models hold ONNX graphs only.  Their weights come from
fixed seeds in tools/fixtures/decoder.py (``_make_model``), so the same torch model is
rebuilt here and checked against the fixture's ONNX logits (max |diff| < 1e-3) before
it is saved to ``benchmarks/work/tiny-<name>-hf``; run.py adds a transformers row when it exists.
``--genai`` also runs onnxruntime-genai's builder on Llama/Qwen2 (``tiny-<name>-genai``), but
its CPU GroupQueryAttention kernel needs head_size % 16 == 0 and the fixtures have head_dim 8,
so those graphs fail at run time (onnxruntime 1.31): off by default.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks.models import FIXTURES, WORK  # noqa: E402

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
    "generation_config.json",
)


def rebuild(kind: str) -> Path:
    import numpy as np
    import onnxruntime as ort
    import torch
    from transformers import AutoTokenizer

    from tools.fixtures import decoder

    fixture = FIXTURES / kind
    tok = AutoTokenizer.from_pretrained(fixture)
    model = decoder._make_model(kind, tok, decoder.SEEDS[kind])  # same seed, same weights as the fixture
    ids = np.array([[5, 17, 42, 99, 7, 3, 250, 11]], dtype=np.int64)
    sess = ort.InferenceSession(str(fixture / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None]}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    onnx_logits = sess.run(["logits"], {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}})[0]
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(ids)).logits.numpy()
    diff = float(np.abs(onnx_logits - torch_logits).max())
    if diff > 1e-3:
        raise SystemExit(f"{kind}: rebuilt weights differ from the fixture (max |logit diff| {diff:.2e})")
    out = WORK / f"tiny-{kind}-hf"
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (fixture / name).is_file():
            shutil.copyfile(fixture / name, out / name)
    print(f"{kind}: {out} (max |logit diff| vs fixture {diff:.1e})")
    return out


def genai(kind: str, hf: Path) -> None:
    out = WORK / f"tiny-{kind}-genai"
    if out.exists():
        shutil.rmtree(out)
    log = WORK / f"tiny-{kind}-genai.log"
    with log.open("w") as f:
        subprocess.run(
            [
                sys.executable,
                str(HERE / "_genai_builder.py"),
                "-i",
                str(hf),
                "-o",
                str(out),
                "-p",
                "fp32",
                "-e",
                "cpu",
                "-c",
                str(WORK / "genai-cache"),
            ],
            check=True,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    print(f"{kind}: {out}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="gpt2,llama,qwen2")
    ap.add_argument("--genai", action="store_true", help="also build genai folders (they fail: head_dim 8)")
    args = ap.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    for kind in [k.strip() for k in args.only.split(",") if k.strip()]:
        hf = rebuild(kind)
        if args.genai and kind in ("llama", "qwen2"):
            genai(kind, hf)


if __name__ == "__main__":
    main()
