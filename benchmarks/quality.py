"""Perplexity of a GGUF file converted by inference4py against llama.cpp's ``llama-perplexity`` on it.

    python benchmarks/quality.py --gguf FILE.gguf [--gguf ...] --text TEXT.txt \\
        --llama-perplexity BIN --llama-tokenize BIN [--ctx 512] [--chunks 20] \\
        [--widths file,32,4] [--kl] [--markdown docs/gguf.md]

llama.cpp's method, on both sides, on the same tokens: the text is tokenized once by llama.cpp
(``llama-tokenize --ids``; our own tokenizer is checked against it and the result recorded), cut
into chunks of ``--ctx`` tokens, the first token of each chunk replaced by BOS when the model adds
one, and the second half of each chunk scored: ``exp(mean(-log p(token | everything before it in
the chunk)))`` over those tokens.  Our side runs the converted graph once per chunk with
onnxruntime (all positions' logits, log-softmax in float64); llama.cpp's side is its own
``llama-perplexity -c CTX --chunks N`` output ("Final estimate").

``--kl`` also compares the next-token distributions, token by token: llama-perplexity writes its
log-probabilities of every scored token (``--kl-divergence-base``, 16-bit, the chunks' tokens in the
file's header), and each width's are compared with them: the mean KL divergence
``sum p_llama * (log p_llama - log p_ours)`` (terms with log p_llama > -16, as llama.cpp sums them) and
how often the two most likely tokens agree.

Widths: ``file`` is the default conversion (every weight as the file holds it), ``32`` float32
(exact, dequantized), ``16``, and ``8`` / ``4`` re-rounded (lossy).  Conversions come from the
library's cache (``INFERENCE4PY_CACHE``), so a second run only scores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.peers.common import cpu_flags  # noqa: E402,F401  (the one place; importers of this module use it)
from benchmarks.run import machine, publish, save_json  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CLEAR_GAP = 0.01  # nats between llama.cpp's two most likely tokens: below it, top-1 is a near-tie


def llama_tokens(binary: str, model: Path, text: Path) -> list[int]:
    """llama.cpp's tokens of ``text`` (with BOS when the model adds one), as llama-perplexity sees them."""
    out = subprocess.run(
        # --no-escape: llama-perplexity reads the text as it is (it turns escape processing off), while
        # llama-tokenize would turn a literal backslash-n in the text into a newline
        [binary, "-m", str(model), "-f", str(text), "--ids", "--log-disable", "--no-escape"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.findall(r"\[[0-9, ]*\]", out)
    if not found:
        raise SystemExit(f"llama-tokenize printed no id list: {out[-300:]!r}")
    return [int(t) for t in json.loads(found[-1])]


def _perplexity_args(binary: str, model: Path, text: Path, ctx: int, chunks: int, threads: int) -> list[str]:
    """llama-perplexity on ``text`` in ``chunks`` chunks of ``ctx`` tokens: the one command line each run extends."""
    return [binary, "-m", str(model), "-f", str(text), "-c", str(ctx), "--chunks", str(chunks), "-t", str(threads)]


def llama_perplexity(binary: str, model: Path, text: Path, ctx: int, chunks: int, threads: int) -> dict[str, Any]:
    started = time.perf_counter()
    run = subprocess.run(
        _perplexity_args(binary, model, text, ctx, chunks, threads),
        capture_output=True,
        text=True,
    )
    log = run.stdout + run.stderr
    match = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    if run.returncode or not match:
        raise SystemExit(f"llama-perplexity failed ({run.returncode}): {log[-800:]}")
    return {"ppl": float(match.group(1)), "stderr": float(match.group(2)), "seconds": time.perf_counter() - started}


def our_perplexity(folder: Path, tokens: list[int], ctx: int, chunks: int, bos: int | None) -> dict[str, Any]:
    """llama.cpp's perplexity recipe on the converted graph (one prefill per chunk, all logits kept)."""
    from inference4py.engine.sessions import create_session

    # the engine's sessions: the compiled ggml operators registered, a GGUF file's bytes read in place
    session = create_session(folder / "model.onnx")
    inputs = {i.name: i for i in session.get_inputs()}
    started = time.perf_counter()
    nll, count = 0.0, 0
    first = ctx // 2
    for c in range(chunks):
        ids = np.array(tokens[c * ctx : (c + 1) * ctx], dtype=np.int64)
        if bos is not None:
            ids[0] = bos
        logits = session.run(["logits"], _chunk_feeds(inputs, ids))[0][0]  # [ctx, vocab] float32
        for rows, log_probs in _log_softmax_blocks(logits, first, ctx - 1, logits.shape[-1]):
            nll -= float(log_probs[np.arange(len(log_probs)), ids[rows.start + 1 : rows.stop + 1]].sum())
            count += len(log_probs)
    return {"ppl": math.exp(nll / count), "tokens_scored": count, "seconds": time.perf_counter() - started}


def llama_log_probs(
    binary: str, model: Path, text: Path, ctx: int, chunks: int, threads: int, out: Path, extra: list[str]
) -> None:
    """llama-perplexity's base file: the chunks' tokens and every scored token's log-probabilities."""
    run = subprocess.run(
        _perplexity_args(binary, model, text, ctx, chunks, threads) + ["--kl-divergence-base", str(out), *extra],
        capture_output=True,
        text=True,
    )
    if run.returncode or not out.exists():
        raise SystemExit(
            f"llama-perplexity --kl-divergence-base failed ({run.returncode}): {(run.stdout + run.stderr)[-800:]}"
        )


def llama_self_agreement(
    binary: str, model: Path, text: Path, ctx: int, chunks: int, threads: int, base: Path
) -> dict[str, Any]:
    """llama.cpp at its own defaults (flash attention, float16 KV cache) against its --kl base: the floor."""
    run = subprocess.run(
        _perplexity_args(binary, model, text, ctx, chunks, threads)
        + ["--kl-divergence-base", str(base), "--kl-divergence"],
        capture_output=True,
        text=True,
    )
    log = run.stdout + run.stderr
    kl = re.search(r"Mean\s+KLD:\s+([0-9.]+)", log)
    top = re.search(r"Same top p:\s+([0-9.]+)", log)
    if run.returncode or not kl or not top:
        raise SystemExit(f"llama-perplexity --kl-divergence failed ({run.returncode}): {log[-800:]}")
    return {"mean_kl": float(kl.group(1)), "top1_agreement": float(top.group(1)) / 100}


def read_log_probs(path: Path) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(ctx, vocab, tokens [chunks, ctx], log-probabilities [chunks, scored, vocab] as float32 memory map)."""
    with path.open("rb") as f:
        if f.read(8) != b"_logits_":
            raise SystemExit(f"{path} is not a llama-perplexity logits file")
        ctx, vocab, chunks = (int(v) for v in np.frombuffer(f.read(12), np.int32))
    offset = 20
    tokens = np.memmap(path, np.int32, "r", offset, (chunks, ctx))
    offset += chunks * ctx * 4
    width = 2 * ((vocab + 1) // 2) + 4  # uint16 slots a token: two floats (scale, minimum), then the codes
    scored = ctx - 1 - ctx // 2
    records = np.memmap(path, np.uint16, "r", offset, (chunks, scored, width))
    return ctx, vocab, np.asarray(tokens), records


def our_agreement(folder: Path, base: Path, bos: int | None) -> dict[str, Any]:
    """Mean KL divergence from llama.cpp's next-token distributions and top-1 agreement, token by token."""
    from inference4py.engine.sessions import create_session

    ctx, vocab, tokens, records = read_log_probs(base)
    session = create_session(folder / "model.onnx")
    inputs = {i.name: i for i in session.get_inputs()}
    first = ctx // 2
    kl_sum, same, count, clear, same_clear = 0.0, 0, 0, 0, 0
    for c in range(len(tokens)):
        ids = tokens[c].astype(np.int64)
        if bos is not None:
            ids[0] = bos
        logits = session.run(["logits"], _chunk_feeds(inputs, ids))[0][0]  # [ctx, vocab] float32
        for rows, ours in _log_softmax_blocks(logits, first, ctx - 1, vocab):
            rec = np.ascontiguousarray(records[c, rows.start - first : rows.stop - first])
            scale_min = rec[:, :4].copy().view(np.float32)  # [rows, 2]
            theirs = scale_min[:, :1].astype(np.float64) * rec[:, 4 : 4 + vocab] + scale_min[:, 1:2]
            kept = theirs > -16.0
            kl_sum += float(np.where(kept, np.exp(theirs) * (theirs - ours), 0.0).sum())
            agree = ours.argmax(axis=-1) == theirs.argmax(axis=-1)
            two = np.partition(theirs, -2, axis=-1)[:, -2:]
            gap = np.abs(two[:, 1] - two[:, 0]) >= CLEAR_GAP
            same += int(agree.sum())
            count += len(ours)
            clear += int(gap.sum())
            same_clear += int((agree & gap).sum())
    return {
        "mean_kl": kl_sum / count,
        "top1_agreement": same / count,
        "tokens_compared": count,
        "top1_agreement_at_clear_gaps": same_clear / max(clear, 1),
        "tokens_with_clear_gaps": clear,
    }


def _log_softmax_blocks(
    logits: np.ndarray, start: int, stop: int, vocab: int, block: int = 32
) -> Iterator[tuple[range, np.ndarray]]:
    """Rows ``start .. stop - 1`` of ``logits`` ``[positions, vocab']`` as float64 log-probabilities over the
    first ``vocab`` entries, ``block`` rows at a time (a 150k vocabulary's full chunk in float64 is GBs)."""
    for first in range(start, stop, block):
        rows = range(first, min(first + block, stop))
        scored = logits[rows.start : rows.stop, :vocab].astype(np.float64)
        top = scored.max(axis=-1, keepdims=True)
        yield rows, scored - top - np.log(np.exp(scored - top).sum(axis=-1, keepdims=True))


def _chunk_feeds(inputs: dict[str, Any], ids: np.ndarray) -> dict[str, np.ndarray]:
    """One chunk's prefill feeds: every position's logits, an empty cache."""
    feeds: dict[str, np.ndarray] = {"input_ids": ids[None], "attention_mask": np.ones((1, len(ids)), np.int64)}
    if "num_logits_to_keep" in inputs:
        feeds["num_logits_to_keep"] = np.array(0, np.int64)
    if "position_ids" in inputs:  # graphs that take positions per row (latent attention)
        feeds["position_ids"] = np.arange(len(ids), dtype=np.int64)[None]
    for name, info in inputs.items():
        if name.startswith("past_key_values."):
            kind = np.int8 if info.type == "tensor(int8)" else np.float32  # an int8 KV cache (kv_cache("int8"))
            feeds[name] = np.zeros((1, info.shape[1], 0, info.shape[3]), kind)
    return feeds


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", action="append", required=True, type=Path, help="a GGUF file (repeat for several)")
    ap.add_argument("--text", required=True, type=Path, help="the text to score")
    ap.add_argument("--llama-perplexity", required=True, help="llama.cpp's llama-perplexity binary")
    ap.add_argument("--llama-tokenize", required=True, help="llama.cpp's llama-tokenize binary")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--widths", default="file,32", help="comma-separated: file, 32, 16, 8, 4")
    ap.add_argument("--kl", action="store_true", help="also KL divergence and top-1 agreement with llama.cpp")
    ap.add_argument(
        "--kl-llama-args",
        default="-fa off -ctk f32 -ctv f32",
        help="llama-perplexity's settings for --kl (default: its float32 KV cache, as ours; '' for its defaults)",
    )
    ap.add_argument("--markdown", type=Path, help="write the table into this page (section bench:quality)")
    args = ap.parse_args(argv)

    from inference4py.gguf.convert import file_digest, gguf_folder
    from inference4py.gguf.reader import GGUFFile
    from inference4py.gguf.tokenizer import generation_defaults
    from inference4py.tokenization import load_tokenizer

    env = {**machine(), "cpu_flags": cpu_flags()}
    rows: list[dict[str, Any]] = []
    for path in args.gguf:
        gguf = GGUFFile(path)
        tokens = llama_tokens(args.llama_tokenize, path, args.text)
        add_bos = bool(gguf.get("tokenizer.ggml.add_bos_token", False))
        bos = int(gguf.get("tokenizer.ggml.bos_token_id")) if add_bos else None
        chunks = min(args.chunks, len(tokens) // args.ctx)
        row: dict[str, Any] = {
            "file": path.name,
            "sha256": file_digest(path),
            "bytes": path.stat().st_size,
            "types": dict(gguf.types()),
            "tokens": len(tokens),
            "chunks": chunks,
            "ctx": args.ctx,
            "eos": generation_defaults(gguf.metadata).get("eos_token_id"),
        }
        print(f"{path.name}: {len(tokens)} tokens, {chunks} chunks of {args.ctx}", file=sys.stderr)
        row["llama.cpp"] = llama_perplexity(args.llama_perplexity, path, args.text, args.ctx, chunks, args.threads)
        print(f"  llama.cpp {row['llama.cpp']['ppl']:.4f}", file=sys.stderr)
        base = Path(tempfile.gettempdir()) / f"{path.stem}-c{args.ctx}x{chunks}.kld"  # hundreds of MB: not kept
        if args.kl:
            extra = args.kl_llama_args.split()
            llama_log_probs(args.llama_perplexity, path, args.text, args.ctx, chunks, args.threads, base, extra)
            row["kl_llama_args"] = args.kl_llama_args
            self_row = llama_self_agreement(
                args.llama_perplexity, path, args.text, args.ctx, chunks, args.threads, base
            )
            row["llama.cpp defaults against the base"] = self_row
            print(
                f"  llama.cpp's defaults: KL {self_row['mean_kl']:.5f}, top-1 {self_row['top1_agreement']:.4f}",
                file=sys.stderr,
            )
        for width in args.widths.split(","):
            bits = None if width == "file" else int(width)
            started = time.perf_counter()
            folder = gguf_folder(path, bits=bits)
            converted = time.perf_counter() - started
            if width == args.widths.split(",")[0]:  # our tokenizer against llama.cpp's, once per file
                ours = list(load_tokenizer(folder).encode(args.text.read_text(encoding="utf-8")))
                row["tokenizer_matches_llama_cpp"] = ours in (tokens, tokens[1:] if add_bos else tokens)
            result = our_perplexity(folder, tokens, args.ctx, chunks, bos)
            if args.kl:
                result.update(our_agreement(folder, base, bos))
                print(f"    KL {result['mean_kl']:.5f}, top-1 {result['top1_agreement']:.4f}", file=sys.stderr)
            result["convert_or_cache_seconds"] = converted
            result["folder_bytes"] = folder_size(folder)
            row[f"inference4py {width}"] = result
            print(f"  inference4py {width}: {result['ppl']:.4f}", file=sys.stderr)
        rows.append(row)
        base.unlink(missing_ok=True)

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    command = "python benchmarks/quality.py " + " ".join(sys.argv[1:] if argv is None else argv)
    save_json(RESULTS / f"quality-{stamp}.json", {"env": env, "command": command, "rows": rows})
    if args.markdown:
        publish(args.markdown, "quality", render(rows, env, command, args.widths.split(",")))
    print(render(rows, env, command, args.widths.split(",")))
    return 0


def render(rows: list[dict[str, Any]], env: dict[str, Any], command: str, widths: list[str]) -> str:
    names = {
        "file": "as the file holds it",
        "32": "float32",
        "16": "float16",
        "8": "int8 re-rounded",
        "4": "int4 re-rounded",
    }
    head = "| file | llama.cpp | " + " | ".join(f"inference4py, {names.get(w, w)}" for w in widths) + " |"
    lines = [head, "|---" * (2 + len(widths)) + "|"]
    for row in rows:
        base = row["llama.cpp"]["ppl"]
        cells = [f"{row['file']} ({row['chunks']} x {row['ctx']} tokens)", f"{base:.4f}"]
        floor = row.get("llama.cpp defaults against the base")
        if floor:  # how far llama.cpp's own two attention settings are apart
            cells[1] += f"; its defaults: KL {floor['mean_kl']:.5f}, top-1 {floor['top1_agreement'] * 100:.2f} %"
        for w in widths:
            result = row[f"inference4py {w}"]
            ours = result["ppl"]
            cell = f"{ours:.4f} ({(ours / base - 1) * 100:+.2f} %)"
            if "mean_kl" in result:
                cell += (
                    f"; KL {result['mean_kl']:.5f}, top-1 {result['top1_agreement'] * 100:.2f} % of "
                    f"{result['tokens_compared']} ({result['top1_agreement_at_clear_gaps'] * 100:.2f} % of the "
                    f"{result['tokens_with_clear_gaps']} whose top two differ by >= {CLEAR_GAP} nats)"
                )
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    flags = ", ".join(env.get("cpu_flags", []))
    return (
        "\n".join(lines)
        + f"\n\n{env['cpu']}, {env['nproc']} cores ({flags}); onnxruntime "
        + f"{env['versions'].get('onnxruntime')}. Command: `{command}`\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
