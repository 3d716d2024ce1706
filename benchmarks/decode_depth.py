"""Decode speed after a long prompt, and the KV cache that prompt leaves, against llama-bench's ``-d``.

    python benchmarks/decode_depth.py --gguf FILE.gguf --llama-bin DIR [--depths 512,4096] [--tokens 32] [--expanded]

For each depth D: the converted folder (the default width, the library's cache) prefills D tokens,
then decodes ``--tokens`` greedy tokens on that cache; tok/s is the decode alone.  The cache's bytes
are counted from the state's own tensors after the prompt (for a latent-attention file: the latent
and the rope key per token and layer; the expanded per-head keys and values it would otherwise hold
are given beside it from config.json).  llama.cpp's side is ``llama-bench -d D -n TOKENS -p 0 -t 2``
on the same file, in the same run.

``--expanded`` (a latent-attention file): the same file also converted to the expanded form, which caches
every head's key and value (``write_decoder(expanded_mla=True)``, in ``--work``), decoded at each depth in
the same run: the absorbed form's decode speed against it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.quality import cpu_flags  # noqa: E402
from benchmarks.run import machine, save_json  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def ours(folder: Path, depth: int, tokens: int) -> dict[str, Any]:
    from inference4py import OnnxTextGenerator

    model = OnnxTextGenerator.builder().model_path(folder).build()
    runtime = model.runtime
    vocab = int(json.loads((folder / "config.json").read_text())["vocab_size"])
    prompt = np.array([[100 + (i * 7919) % min(5000, vocab - 100) for i in range(depth)]], np.int64)
    state = runtime.new_state(1, capacity=depth + tokens + 1)
    logits = state.prefill(prompt)
    cache = sum(int(np.prod(v.shape())) * 4 for v in state._past) if getattr(state, "_past", None) else None
    token = int(np.asarray(logits)[0, -1].argmax())
    started = time.perf_counter()
    for _ in range(tokens):
        logits = state.step(token)
        token = int(np.asarray(logits)[0, -1].argmax())
    return {"decode_tok_s": tokens / (time.perf_counter() - started), "cache_bytes": cache}


def expanded_bytes(config: dict[str, Any], depth: int) -> int | None:
    """Per-head keys and values (float32) a latent-attention model would cache without its latent."""
    if not config.get("kv_lora_rank"):
        return None
    per_head = config["qk_nope_head_dim"] + config["qk_rope_head_dim"] + config["v_head_dim"]
    return config["num_attention_heads"] * per_head * config["num_hidden_layers"] * 4 * depth


def expanded_folder(gguf: Path, folder: Path, work: Path) -> Path:
    """The converted ``folder`` with its graph rewritten in MLA's expanded form (weights still the file's)."""
    import shutil

    from inference4py.gguf.graph import write_decoder
    from inference4py.gguf.reader import GGUFFile

    out = work / f"{gguf.stem}-expanded"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(folder, out)
    (out / "model.onnx").unlink()
    ggml = not (folder / "model.onnx.data").exists()  # the default conversion: the file's bytes in place
    write_decoder(GGUFFile(gguf), out, None, ggml=ggml, expanded_mla=True)
    return out


def llama(binary: Path, gguf: Path, depth: int, tokens: int) -> float:
    run = subprocess.run(
        [
            str(binary),
            "-m",
            str(gguf),
            "-t",
            "2",
            "-p",
            "0",
            "-n",
            str(tokens),
            "-d",
            str(depth),
            "-r",
            "1",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise SystemExit(f"llama-bench failed: {run.stderr[-800:]}")
    return float(json.loads(run.stdout)[0]["avg_ts"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, type=Path)
    ap.add_argument("--llama-bin", required=True, type=Path)
    ap.add_argument("--depths", default="512,4096")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--expanded", action="store_true", help="also decode MLA's expanded form (latent-attention files)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/decode-depth"), help="where the expanded form is written")
    args = ap.parse_args(argv)
    from inference4py.gguf.convert import gguf_folder

    folder = gguf_folder(args.gguf)
    config = json.loads((folder / "config.json").read_text())
    if args.expanded and not config.get("kv_lora_rank"):
        raise SystemExit(f"--expanded: {args.gguf} has no latent attention (no kv_lora_rank)")
    expanded = expanded_folder(args.gguf, folder, args.work) if args.expanded else None
    rows = []
    for depth in (int(d) for d in args.depths.split(",")):
        row: dict[str, Any] = {"depth": depth, "inference4py": ours(folder, depth, args.tokens)}
        if expanded is not None:
            row["inference4py_expanded"] = ours(expanded, depth, args.tokens)
        row["expanded_cache_bytes"] = expanded_bytes(config, depth)
        row["llama.cpp_decode_tok_s"] = llama(args.llama_bin / "llama-bench", args.gguf, depth, args.tokens)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    env = {**machine(), "cpu_flags": cpu_flags()}
    command = "python benchmarks/decode_depth.py " + " ".join(sys.argv[1:] if argv is None else argv)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    save_json(
        RESULTS / f"decode-depth-{stamp}.json", {"env": env, "command": command, "file": args.gguf.name, "rows": rows}
    )
    print(
        f"| {args.gguf.name} depth | cache (ours) | expanded cache | decode tok/s: inference4py | llama.cpp | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        o = r["inference4py"]
        cache = f"{o['cache_bytes'] / 2**20:.1f} MiB" if o["cache_bytes"] else "-"
        exp = f"{r['expanded_cache_bytes'] / 2**20:.1f} MiB" if r["expanded_cache_bytes"] else "-"
        ratio = o["decode_tok_s"] / r["llama.cpp_decode_tok_s"]
        print(
            f"| {r['depth']} | {cache} | {exp} | {o['decode_tok_s']:.1f} | {r['llama.cpp_decode_tok_s']:.1f} | {ratio:.2f}x |"
        )
    if expanded is not None:
        print("\n| depth | absorbed: cache | decode tok/s | expanded: cache | decode tok/s | absorbed / expanded |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            a, e = r["inference4py"], r["inference4py_expanded"]
            print(
                f"| {r['depth']} | {a['cache_bytes'] / 2**20:.1f} MiB | {a['decode_tok_s']:.1f} | "
                f"{e['cache_bytes'] / 2**20:.1f} MiB | {e['decode_tok_s']:.1f} | "
                f"{a['decode_tok_s'] / e['decode_tok_s']:.2f}x |"
            )
    print(f"\n{env['cpu']}, {env['nproc']} cores; command: `{command}`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
