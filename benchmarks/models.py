"""Which folders each benchmark model uses, and the rows (peer x folder) of its table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "work"
FIXTURES = ROOT / "tests" / "fixtures" / "models"

I4PY = "inference4py"


@dataclass(frozen=True)
class Row:
    """One line of a table: a peer module on one folder.

    ``ref`` names the inference4py row it is compared with (None for that row itself);
    ``needs`` is a file that must exist for the row to run (else it is reported as skipped).
    """

    name: str
    module: str
    folder: Path
    precision: str = "fp32"
    ref: str | None = I4PY
    seq2seq: bool = False
    settings: tuple[str, ...] = ("greedy", "sample", "beam4")
    fuse: bool | None = None  # the builder's fuse_attention(); None: not called (the default load)


@dataclass(frozen=True)
class Model:
    key: str
    prompt: dict
    max_new_tokens: int
    rows: tuple[Row, ...]
    build_hint: str = ""
    iters: int = 30  # measured generations per process (a tiny generation lasts ~30 ms: many, or noise wins)


SMOLLM2_PROMPT = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
TINY_PROMPT = {"text": "The old house stood at the end of the road"}
SEQ2SEQ_PROMPT = {"text": "The library runs generative models on a small runtime and keeps the loop in Python."}
NO_BEAM = ("greedy", "sample")


def smollm2() -> Model:
    opt, g32, g4, hf = (
        WORK / "smollm2-optimum",
        WORK / "smollm2-genai-fp32",
        WORK / "smollm2-genai-int4",
        WORK / "smollm2-hf",
    )
    fused = WORK / "smollm2-optimum-fused"  # `inference4py optimize` of the optimum export
    q4 = WORK / "smollm2-optimum-int4"  # `inference4py quantize --bits 4` of the fused export
    rows = (
        # inference4py runs optimum's export after `inference4py optimize` (what docs/performance.md recommends)
        Row(I4PY, "inference4py_peer", fused, ref=None),
        Row(f"{I4PY}[default]", "inference4py_peer", opt, ref=None),  # no flags: fused on first load, cached
        Row(f"{I4PY}[unfused]", "inference4py_peer", opt, fuse=False),
        Row("transformers", "transformers_peer", hf),
        Row("optimum", "optimum_peer", opt),
        Row("genai", "genai_peer", g32, settings=NO_BEAM),
        Row("bare-iobinding", "bare_loop", opt, settings=NO_BEAM),
        Row("bare-iobinding[fused]", "bare_loop", fused, settings=NO_BEAM),
        Row(f"{I4PY}[genai-fp32]", "inference4py_peer", g32, settings=NO_BEAM),
        Row("bare-iobinding[genai-fp32]", "bare_loop", g32, settings=NO_BEAM, ref=f"{I4PY}[genai-fp32]"),
        Row(f"{I4PY}[genai-int4]", "inference4py_peer", g4, precision="int4", ref=None, settings=NO_BEAM),
        Row("genai[int4]", "genai_peer", g4, precision="int4", ref=f"{I4PY}[genai-int4]", settings=NO_BEAM),
        Row(
            "bare-iobinding[genai-int4]", "bare_loop", g4, precision="int4", ref=f"{I4PY}[genai-int4]", settings=NO_BEAM
        ),
        Row(f"{I4PY}[quantized-int4]", "inference4py_peer", q4, precision="int4", ref=None, settings=NO_BEAM),
    )
    return Model("smollm2", SMOLLM2_PROMPT, 128, rows, build_hint="python benchmarks/build_smollm2.py", iters=2)


def tiny_decoder(name: str) -> Model:
    folder = FIXTURES / name
    rows = [
        Row(I4PY, "inference4py_peer", folder, ref=None),
        Row("bare-iobinding", "bare_loop", folder, settings=NO_BEAM),
        Row("optimum", "optimum_peer", folder),
    ]
    hf = WORK / f"tiny-{name}-hf"
    if (hf / "config.json").is_file():  # made by build_tiny.py (same random weights as the fixture)
        rows.append(Row("transformers", "transformers_peer", hf))
    genai = WORK / f"tiny-{name}-genai"
    if (genai / "genai_config.json").is_file():
        rows.append(Row("genai", "genai_peer", genai, settings=NO_BEAM))
        rows.append(Row(f"{I4PY}[genai]", "inference4py_peer", genai, settings=NO_BEAM, ref=None))
    # Context is 128 positions: a 12-token prompt + 100 new tokens fits.
    return Model(name, TINY_PROMPT, 100, tuple(rows))


def tiny_seq2seq(name: str) -> Model:
    folder = FIXTURES / name
    rows = [
        Row(I4PY, "inference4py_peer", folder, ref=None, seq2seq=True),
        Row("bare-iobinding", "bare_loop", folder, seq2seq=True, settings=NO_BEAM),
        Row("optimum", "optimum_peer", folder, seq2seq=True),
    ]
    hf = WORK / f"tiny-{name}-hf"
    if (hf / "config.json").is_file():
        rows.append(Row("transformers", "transformers_peer", hf, seq2seq=True))
    # BART has 64 decoder positions: the start token + 48 new tokens fit.
    return Model(name, SEQ2SEQ_PROMPT, 48, tuple(rows))


def resolve(key: str) -> list[Model]:
    if key == "smollm2":
        return [smollm2()]
    if key in ("gpt2", "llama", "qwen2"):
        return [tiny_decoder(key)]
    if key in ("t5", "bart"):
        return [tiny_seq2seq(key)]
    if key == "tiny":
        return [tiny_decoder(k) for k in ("gpt2", "llama", "qwen2")] + [tiny_seq2seq(k) for k in ("t5", "bart")]
    if key == "all":
        return resolve("tiny") + resolve("smollm2")
    raise SystemExit(f"unknown model {key!r}: use smollm2, tiny, gpt2, llama, qwen2, t5, bart or all")
