"""Quality of the int4 prompt pass's choices: MatMulNBits at accuracy level 4 (int8 activations, what
onnxruntime-genai's folders and our GGUF conversions ask for) against level 1 (float32 activations on
the dequantized blocks), both against the float32 model of the same weights (issue 35).

    python benchmarks/prompt_pass_quality.py --text TEXT.txt \\
        [--gguf FILE.gguf ...] [--genai FP32_FOLDER=INT4_FOLDER ...] [--ctx 512] [--chunks 8] [--json OUT]

Pairs (float32 reference -> int4):

* ``--gguf FILE``: the library's conversion with ``gguf_bits(32)`` (every weight dequantized, exact)
  -> its default conversion (the file's own 4- and 6-bit blocks as ``MatMulNBits``);
* ``--genai FP32=INT4``: onnxruntime-genai's builder folders (fp32 -> int4 RTN, block 32).

Each int4 graph runs twice: as it is (level 4) and as a copy whose ``MatMulNBits`` nodes say
``accuracy_level`` 1 (weights unchanged, the model file rewritten next to the same data).  Every
chunk of ``--ctx`` tokens of ``--text`` runs as one prompt pass (zero-length past, every position's
logits), as a prefill computes it.  Reported per variant: perplexity over the second half of each
chunk (llama.cpp's recipe), and over every position of every chunk the share whose next-token
argmax equals the float32 model's (teacher-forced greedy agreement) and the mean KL(fp32 || int4).
Tokens: the reference folder's tokenizer.json on the text, the same ids for every variant.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.run import machine  # noqa: E402


def with_accuracy_level(folder: Path, level: int, work: Path) -> Path:
    """A copy of ``folder`` whose model.onnx asks MatMulNBits for ``level`` (the weights' data files hard-linked:
    ``work`` must be on the same file system)."""
    import onnx

    out = work / f"{folder.name}-level{level}"
    out.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        if item.name != "model.onnx" and item.is_file() and not (out / item.name).exists():
            os.link(item.resolve(), out / item.name)  # a hard link: onnxruntime refuses data outside the folder
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    changed = 0
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    node.attribute.remove(attr)
                    break
            node.attribute.append(onnx.helper.make_attribute("accuracy_level", level))
            changed += 1
    if not changed:
        raise SystemExit(f"{folder} has no MatMulNBits node")
    onnx.save(model, str(out / "model.onnx"))
    return out


def prompt_pass(folder: Path, chunks: list[np.ndarray]) -> list[np.ndarray]:
    """Every position's log-probabilities ``[ctx, vocab]`` (float64) per chunk, each chunk one prompt pass."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    out = []
    for ids in chunks:
        n = len(ids)
        feeds: dict[str, np.ndarray] = {"input_ids": ids[None], "attention_mask": np.ones((1, n), np.int64)}
        if "position_ids" in inputs:
            feeds["position_ids"] = np.arange(n, dtype=np.int64)[None]
        if "num_logits_to_keep" in inputs:
            feeds["num_logits_to_keep"] = np.array(0, np.int64)
        for name, info in inputs.items():
            if name.startswith("past_key_values."):
                feeds[name] = np.zeros((1, info.shape[1], 0, info.shape[3]), np.float32)
        logits = session.run(["logits"], feeds)[0][0].astype(np.float64)
        top = logits.max(axis=-1, keepdims=True)
        out.append(logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)))
    return out


def score(reference: list[np.ndarray], variant: list[np.ndarray], chunks: list[np.ndarray]) -> dict[str, float]:
    nll, count, agree, positions, kl = 0.0, 0, 0, 0, 0.0
    for ref, got, ids in zip(reference, variant, chunks):
        half = len(ids) // 2
        nll -= float(got[half:-1][np.arange(len(ids) - 1 - half), ids[half + 1 :]].sum())
        count += len(ids) - 1 - half
        agree += int((ref.argmax(-1) == got.argmax(-1)).sum())
        positions += len(ids)
        kl += float((np.exp(ref) * (ref - got)).sum())
    return {"ppl": math.exp(nll / count), "greedy_agreement": agree / positions, "kl_mean": kl / positions}


def measure(name: str, fp32: Path, int4: Path, text: str, ctx: int, n_chunks: int, work: Path) -> dict[str, Any]:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(fp32 / "tokenizer.json")).encode(text).ids
    if len(ids) < ctx * n_chunks:
        raise SystemExit(f"{name}: the text gives {len(ids)} tokens, fewer than {ctx} x {n_chunks}")
    chunks = [np.asarray(ids[c * ctx : (c + 1) * ctx], dtype=np.int64) for c in range(n_chunks)]
    started = time.perf_counter()
    reference = prompt_pass(fp32, chunks)
    row: dict[str, Any] = {"model": name, "fp32": str(fp32), "int4": str(int4)}
    row["fp32_ppl"] = score(reference, reference, chunks)["ppl"]
    for label, folder in (("level4", int4), ("level1", with_accuracy_level(int4, 1, work))):
        row[label] = score(reference, prompt_pass(folder, chunks), chunks)
    row["seconds"] = time.perf_counter() - started
    return row


def render(rows: list[dict[str, Any]], ctx: int, n_chunks: int) -> str:
    lines = [
        "| model (int4 graph) | perplexity, fp32 | level 4 (int8 activations) | level 1 (fp32 activations) | "
        "greedy agreement with fp32, level 4 / level 1 | KL(fp32 ‖ int4), level 4 / level 1 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["level4"], r["level1"]
        lines.append(
            f"| {r['model']} | {r['fp32_ppl']:.3f} | {a['ppl']:.3f} ({a['ppl'] / r['fp32_ppl'] - 1:+.2%}) | "
            f"{b['ppl']:.3f} ({b['ppl'] / r['fp32_ppl'] - 1:+.2%}) | {a['greedy_agreement']:.4f} / "
            f"{b['greedy_agreement']:.4f} | {a['kl_mean']:.5f} / {b['kl_mean']:.5f} |"
        )
    lines.append(f"\n{n_chunks} chunks of {ctx} tokens, each one prompt pass.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True, type=Path)
    ap.add_argument("--gguf", action="append", default=[], type=Path, help="a GGUF file (repeat for several)")
    ap.add_argument("--genai", action="append", default=[], help="FP32_FOLDER=INT4_FOLDER (repeat for several)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from inference4py.gguf.convert import gguf_folder

    text = args.text.read_text(encoding="utf-8")
    pairs = [(f"{p.name} (our conversion)", gguf_folder(p, bits=32), gguf_folder(p)) for p in args.gguf]
    for spec in args.genai:
        fp32, _, int4 = spec.partition("=")
        pairs.append((f"{Path(int4).name} (onnxruntime-genai)", Path(fp32), Path(int4)))
    rows = []
    work = Path(tempfile.mkdtemp(prefix="prompt-pass-", dir=pairs[0][2].parent if pairs else None))
    try:
        for name, fp32, int4 in pairs:
            rows.append(measure(name, fp32, int4, text, args.ctx, args.chunks, work))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = render(rows, args.ctx, args.chunks)
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows, "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
