"""How much int4 output differs from fp32 on the same weights (SmolLM2-135M-Instruct).

    python benchmarks/quantize_quality.py [--tokens 64] [--json OUT] [--control] [--work benchmarks/work]

Needs the folders made by ``benchmarks/build_smollm2.py``.  Pairs (fp32 reference -> int4):

- ``smollm2-optimum`` -> ``smollm2-optimum-int4``: the optimum fp32 export against
  ``inference4py quantize --bits 4`` (block 32, symmetric, accuracy_level 4) of its
  GroupQueryAttention-fused copy ``smollm2-optimum-fused``;
- ``smollm2-genai-fp32`` -> ``smollm2-genai-int4``: onnxruntime-genai's builder, for comparison;
- with ``--control``: ``smollm2-optimum`` -> ``smollm2-optimum-fused`` (fusion only, no
  quantization), the noise floor of the first pair.

Method, over a fixed set of chat prompts rendered with each folder's own chat template:

1. free-running greedy: each model generates up to ``--tokens`` tokens with inference4py
   (``OnnxTextGenerator``, greedy, stops at EOS).  Reported: the fraction of prompts whose
   generated ids are identical, and the mean index of the first differing token over the
   prompts that differ (a length difference counts as a difference at the shorter length);
2. teacher-forced: the fp32 greedy continuation is appended to the prompt and each graph
   runs once over the whole sequence with onnxruntime directly (zero-length past tensors,
   attention_mask of ones, position_ids = arange when the graph has that input).  At every
   position that predicts a continuation token, reported: top-1 agreement of the two
   next-token argmaxes and KL(fp32 || int4) of the next-token distributions (nats; mean and
   max over all positions of all prompts).  As a check, the fp32 teacher-forced argmax must
   reproduce its own greedy tokens (``fp32_self_agreement`` in the JSON, should be 1.0);
3. size: bytes of every file in each model folder (tokenizer included), in MB (10^6 bytes).

Caveat: these weights come from a Q4_1 GGUF dequantized to fp32 (see build_smollm2.py), so
the "fp32" reference already sits on a 4-bit grid; error on a model trained in fp32/bf16 may differ.
No timings are measured here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from inference4py import OnnxTextGenerator  # noqa: E402 - after the sys.path line above

PROMPTS: tuple[str, ...] = (
    "What is the capital of France?",
    "Explain how photosynthesis works in simple terms.",
    "Write a short poem about the ocean at night.",
    "Give me three tips for learning a new programming language.",
    "What are the main differences between a list and a tuple in Python?",
    "Summarize the plot of Romeo and Juliet in a few sentences.",
    "How do I make a cup of green tea?",
    "Why is the sky blue?",
)

_NP_TYPES: dict[str, Any] = {
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
}


@dataclass(frozen=True)
class Pair:
    """A reference folder and the folder compared against it (names under the work folder)."""

    label: str
    fp32: str
    int4: str


PAIRS: tuple[Pair, ...] = (
    Pair("optimum fp32 -> inference4py int4", "smollm2-optimum", "smollm2-optimum-int4"),
    Pair("genai fp32 -> genai int4", "smollm2-genai-fp32", "smollm2-genai-int4"),
)
CONTROL = Pair("optimum fp32 -> fused fp32 (control)", "smollm2-optimum", "smollm2-optimum-fused")


@dataclass
class Reference:
    """What the fp32 model of a pair produced: prompt ids, greedy ids, teacher-forced log-probs."""

    prompt_ids: list[list[int]]
    greedy_ids: list[tuple[int, ...]]
    log_probs: list[np.ndarray]  # per prompt: [len(greedy), vocab] float32 log-softmax


@dataclass
class PairResult:
    """The numbers reported for one pair."""

    pair: str
    fp32_folder: str
    int4_folder: str
    fp32_mb: float
    int4_mb: float
    prompts: int
    identical_greedy: float
    first_diff_mean: float | None
    first_diff: list[int | None]
    positions: int
    top1_agreement: float
    kl_mean: float
    kl_max: float
    fp32_self_agreement: float


# --------------------------------------------------------------------------- helpers
def folder_mb(folder: Path) -> float:
    """Total size of the files in ``folder`` in MB (10^6 bytes)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def greedy_run(folder: Path, tokens: int, threads: int | None) -> tuple[list[list[int]], list[tuple[int, ...]]]:
    """Prompt ids and greedy generated ids (EOS included when it ended the answer) per prompt."""
    builder = OnnxTextGenerator.builder().model_path(folder).chat_template().greedy()
    if threads:
        builder = builder.intra_op_threads(threads)
    with builder.build() as gen:
        prompt_ids = [gen.encode_prompt(messages(q)) for q in PROMPTS]
        outputs = [tuple(gen.generate(messages(q), max_new_tokens=tokens).token_ids) for q in PROMPTS]
    return prompt_ids, outputs


def _config_dims(folder: Path) -> dict[str, int]:
    """kv heads / head size from genai_config.json or config.json, for symbolic graph dims."""
    genai = folder / "genai_config.json"
    if genai.is_file():
        dec = json.loads(genai.read_text())["model"]["decoder"]
        return {"kv_heads": int(dec["num_key_value_heads"]), "head_size": int(dec["head_size"])}
    cfg = json.loads((folder / "config.json").read_text())
    heads = int(cfg["num_attention_heads"])
    head_size = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    return {"kv_heads": int(cfg.get("num_key_value_heads", heads)), "head_size": head_size}


def _empty_past(arg: ort.NodeArg, folder: Path) -> np.ndarray:
    """A zero-length past tensor [1, kv_heads, 0, head_size] for a past_key_values input."""
    shape = list(arg.shape)
    if len(shape) != 4:
        raise ValueError(f"{folder}: past input {arg.name} has shape {shape}, expected 4 dims")
    dims = _config_dims(folder)
    kv_heads = shape[1] if isinstance(shape[1], int) else dims["kv_heads"]
    head_size = shape[3] if isinstance(shape[3], int) else dims["head_size"]
    return np.zeros((1, kv_heads, 0, head_size), dtype=_NP_TYPES[arg.type])


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def teacher_forced(
    folder: Path, prompts: Sequence[list[int]], continuations: Sequence[tuple[int, ...]], threads: int | None
) -> list[np.ndarray]:
    """Next-token log-probs at the positions that predict each continuation token.

    One plain ``session.run`` per prompt over prompt + continuation, no KV cache carried.
    Returns per prompt an array [len(continuation), vocab] (float32).
    """
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    onnx_files = sorted(folder.glob("*.onnx"))
    if len(onnx_files) != 1:
        raise ValueError(f"{folder}: expected one .onnx graph, found {[p.name for p in onnx_files]}")
    session = ort.InferenceSession(str(onnx_files[0]), options, providers=["CPUExecutionProvider"])
    args = session.get_inputs()
    past = {a.name: _empty_past(a, folder) for a in args if a.name.startswith("past_key_values")}
    types = {a.name: _NP_TYPES[a.type] for a in args}
    known = {"input_ids", "attention_mask", "position_ids", *past}
    unknown = [a.name for a in args if a.name not in known]
    if unknown:
        raise ValueError(f"{folder}: graph inputs not handled: {unknown}")
    results: list[np.ndarray] = []
    for prompt, cont in zip(prompts, continuations):
        seq = list(prompt) + list(cont)
        n = len(seq)
        feed: dict[str, np.ndarray] = {
            "input_ids": np.asarray([seq], dtype=types["input_ids"]),
            "attention_mask": np.ones((1, n), dtype=types["attention_mask"]),
            **past,
        }
        if "position_ids" in types:
            feed["position_ids"] = np.arange(n, dtype=types["position_ids"])[None, :]
        (logits,) = session.run(["logits"], feed)
        if logits.shape[:2] != (1, n):
            raise ValueError(f"{folder}: logits shape {logits.shape}, expected [1, {n}, vocab]")
        # logits[t] predicts token t+1: continuation token i sits at len(prompt)+i.
        start = len(prompt) - 1
        results.append(log_softmax(logits[0, start : start + len(cont)]).astype(np.float32))
    return results


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix), None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


# --------------------------------------------------------------------------- driver
def reference(folder: Path, tokens: int, threads: int | None) -> Reference:
    prompt_ids, greedy_ids = greedy_run(folder, tokens, threads)
    log_probs = teacher_forced(folder, prompt_ids, greedy_ids, threads)
    return Reference(prompt_ids, greedy_ids, log_probs)


def compare(pair: Pair, ref: Reference, work: Path, tokens: int, threads: int | None) -> PairResult:
    folder = work / pair.int4
    prompt_ids, greedy_ids = greedy_run(folder, tokens, threads)
    if prompt_ids != ref.prompt_ids:
        raise ValueError(f"{pair.label}: the two folders encode the prompts differently")
    log_probs = teacher_forced(folder, ref.prompt_ids, ref.greedy_ids, threads)

    diffs = [first_difference(a, b) for a, b in zip(ref.greedy_ids, greedy_ids)]
    diverged = [d for d in diffs if d is not None]
    agree = kl_sum = 0.0
    kl_max = 0.0
    self_agree = 0
    positions = 0
    for p_lp, q_lp, cont in zip(ref.log_probs, log_probs, ref.greedy_ids):
        p64, q64 = p_lp.astype(np.float64), q_lp.astype(np.float64)
        kl = np.maximum((np.exp(p64) * (p64 - q64)).sum(axis=-1), 0.0)  # clip float round-off below 0
        p_top = p_lp.argmax(axis=-1)
        agree += float((p_top == q_lp.argmax(axis=-1)).sum())
        self_agree += int((p_top == np.asarray(cont)).sum())
        kl_sum += float(kl.sum())
        kl_max = max(kl_max, float(kl.max()))
        positions += len(cont)
    return PairResult(
        pair=pair.label,
        fp32_folder=pair.fp32,
        int4_folder=pair.int4,
        fp32_mb=round(folder_mb(work / pair.fp32), 1),
        int4_mb=round(folder_mb(folder), 1),
        prompts=len(PROMPTS),
        identical_greedy=sum(d is None for d in diffs) / len(diffs),
        first_diff_mean=float(np.mean(diverged)) if diverged else None,
        first_diff=diffs,
        positions=positions,
        top1_agreement=agree / positions,
        kl_mean=kl_sum / positions,
        kl_max=kl_max,
        fp32_self_agreement=self_agree / positions,
    )


def markdown(results: Sequence[PairResult], tokens: int) -> str:
    lines = [
        (
            f"| pair | fp32 MB | int4 MB | identical greedy ({tokens} tok) | mean first diff | "
            "top-1 agreement | mean KL (nats) | max KL |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        first = "-" if r.first_diff_mean is None else f"{r.first_diff_mean:.1f}"
        identical = f"{round(r.identical_greedy * r.prompts)}/{r.prompts}"
        lines.append(
            f"| {r.pair} | {r.fp32_mb:.1f} | {r.int4_mb:.1f} | {identical} | {first} | "
            f"{r.top1_agreement:.1%} | {r.kl_mean:.4f} | {r.kl_max:.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens per prompt (default 64)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--work", type=Path, default=HERE / "work", help="folder of the built models")
    parser.add_argument("--control", action="store_true", help="add optimum fp32 -> fused fp32 (no quantization)")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (default: its own)")
    args = parser.parse_args(argv)

    pairs = (*PAIRS, CONTROL) if args.control else PAIRS
    missing = sorted({name for p in pairs for name in (p.fp32, p.int4) if not (args.work / name).is_dir()})
    if missing:
        parser.error(f"missing model folders under {args.work}: {missing} (run benchmarks/build_smollm2.py)")

    references: dict[str, Reference] = {}
    results: list[PairResult] = []
    for pair in pairs:
        if pair.fp32 not in references:
            print(f"[{pair.fp32}] greedy + teacher-forced", file=sys.stderr, flush=True)
            references[pair.fp32] = reference(args.work / pair.fp32, args.tokens, args.threads)
        print(f"[{pair.int4}] greedy + teacher-forced", file=sys.stderr, flush=True)
        results.append(compare(pair, references[pair.fp32], args.work, args.tokens, args.threads))

    print(markdown(results, args.tokens))
    low = [r.pair for r in results if r.fp32_self_agreement < 1.0]
    if low:
        print(f"\nnote: fp32 teacher-forced argmax != its own greedy tokens somewhere in: {low}")
    if args.json:
        payload = {"tokens": args.tokens, "prompts": list(PROMPTS), "results": [asdict(r) for r in results]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
