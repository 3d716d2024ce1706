"""Which folders each benchmark model uses, and the rows (peer x folder) of its table."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "work"
FIXTURES = ROOT / "tests" / "fixtures" / "models"
REAL = Path.home() / ".cache" / "inference4py" / "real"  # tools/build_real.py's folders (real weights)
# OpenVINO GenAI runs in its own venv (never a dependency of the library): see benchmarks/README.md.
OPENVINO = Path(os.environ.get("INFERENCE4PY_OV_MODELS", Path.home() / ".cache" / "inference4py" / "openvino"))
OV_PYTHON = os.environ.get("INFERENCE4PY_OV_PYTHON", "/work/ov-venv/bin/python")
OV_HINT = "see benchmarks/README.md, OpenVINO GenAI"
# inference4py on onnxruntime's OpenVINO execution provider: the onnxruntime-openvino build (a whole onnxruntime
# distribution that replaces the `onnxruntime` module) lives in its own venv, with inference4py installed there.
ORTOV_PYTHON = os.environ.get("INFERENCE4PY_ORTOV_PYTHON", "/work/ortov-venv/bin/python")
ORTOV_HINT = (
    "see benchmarks/README.md, onnxruntime's OpenVINO execution provider: python3.11 -m venv /work/ortov-venv && "
    "/work/ortov-venv/bin/pip install onnxruntime-openvino==1.24.1 numpy tokenizers sentencepiece huggingface_hub "
    "pillow jinja2 onnx tqdm psutil && /work/ortov-venv/bin/pip install --no-deps -e ."
)
OV_EP = ("OpenVINOExecutionProvider", "CPUExecutionProvider")

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
    python: str | None = None  # the worker's interpreter (None: the driver's own), e.g. the OpenVINO venv
    providers: tuple[str, ...] | None = None  # the worker's onnxruntime execution providers (None: the library default)
    kv_cache_precision: str | None = None  # OpenVINO rows: the CPU plugin's KV_CACHE_PRECISION (None: its default, u8)


@dataclass(frozen=True)
class Model:
    key: str
    prompt: dict
    max_new_tokens: int
    rows: tuple[Row, ...]
    build_hint: str = ""
    iters: int = 30  # measured generations per process (a tiny generation lasts ~30 ms: many, or noise wins)


def openvino_ep_rows(folder: Path, int4_folder: Path, fp32_ref: str = I4PY) -> tuple[Row, ...]:
    """inference4py on onnxruntime's OpenVINO execution provider (onnxruntime-openvino, in its venv): the
    unfused optimum export and onnxruntime-genai's int4 folder."""
    return (
        Row(
            f"{I4PY}[openvino-ep]",
            "inference4py_peer",
            folder,
            ref=fp32_ref,
            settings=NO_BEAM,
            fuse=False,
            python=ORTOV_PYTHON,
            providers=OV_EP,
        ),
        Row(
            f"{I4PY}[openvino-ep-int4]",
            "inference4py_peer",
            int4_folder,
            precision="int4",
            ref=f"{I4PY}[genai-int4]",
            settings=NO_BEAM,
            python=ORTOV_PYTHON,
            providers=OV_EP,
        ),
    )


def openvino_rows(name: str, fp32_ref: str = I4PY, int4_ref: str = f"{I4PY}[genai-int4]") -> tuple[Row, ...]:
    """OpenVINO GenAI on optimum-intel's exports of ``name`` (fp32 and int4 sym, group 32), in its venv; both
    also with an fp32 KV cache (``[kv-f32]``, ``[int4-kv-f32]``: the CPU plugin's default cache is 8-bit, ours
    is fp32)."""

    def row(label: str, layout: str, ref: str, kv_cache_precision: str | None = None) -> Row:
        return Row(
            label,
            "openvino_peer",
            OPENVINO / f"{name}-{layout}",
            precision=layout,
            ref=ref,
            settings=NO_BEAM,
            python=OV_PYTHON,
            kv_cache_precision=kv_cache_precision,
        )

    return (
        row("openvino", "fp32", fp32_ref),
        row("openvino[kv-f32]", "fp32", fp32_ref, "f32"),
        row("openvino[int4]", "int4", int4_ref),
        row("openvino[int4-kv-f32]", "int4", int4_ref, "f32"),
    )


SMOLLM2_PROMPT = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}


def long_prompt() -> dict:
    """``--prompt long``: one chat turn of about 1,000 tokens (retrieval-style context, then a question).

    Deterministic: 22 shipping records made from fixed lists; with each model's chat template,
    1,029 tokens for SmolLM2 and 953 for Qwen2.5 (both templates add their default system turn).
    """
    goods = ("copper wire", "oak planks", "glass jars", "wool blankets", "steel bolts", "paper rolls")
    cities = ("Lyon", "Porto", "Ghent", "Turin", "Bremen", "Malmo", "Leeds", "Brno", "Split")
    states = ("delivered", "in transit", "held at customs", "returned")
    lines = []
    for i in range(22):
        lines.append(
            f"Order {1001 + i}: {3 + (i * 7) % 40} crates of {goods[i % 6]} left {cities[i % 9]} for "
            f"{cities[(i + 1 + i % 8) % 9]} on 2024-{1 + i % 12:02d}-{1 + (i * 11) % 28:02d}, carrier "
            f"{('North', 'Delta', 'Orbit', 'Keel')[i % 4]} Freight, status {states[(i * 5) % 4]}."
        )
    content = (
        "Here are this quarter's shipping records.\n\n"
        + "\n".join(lines)
        + "\n\nWhich orders went to Lyon, what did they carry, and which of them were delivered? "
        "Answer with a short list, then explain any delays you can infer from the records."
    )
    return {"messages": [{"role": "user", "content": content}]}


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
        *openvino_rows("smollm2"),
        *openvino_ep_rows(opt, g4, fp32_ref=f"{I4PY}[unfused]"),
    )
    return Model("smollm2", SMOLLM2_PROMPT, 128, rows, build_hint="python benchmarks/build_smollm2.py", iters=2)


def qwen25_coder() -> Model:
    """Qwen2.5-Coder-0.5B-Instruct (real weights, tools/build_real.py): inference4py, genai, OpenVINO GenAI."""
    name = "qwen2.5-coder"
    opt, fused, g32, g4 = (REAL / f"{name}-{x}" for x in ("optimum", "fused", "genai-fp32", "genai-int4"))
    rows = (
        Row(I4PY, "inference4py_peer", fused, ref=None, settings=NO_BEAM),
        Row(f"{I4PY}[default]", "inference4py_peer", opt, ref=None, settings=NO_BEAM),
        Row(f"{I4PY}[unfused]", "inference4py_peer", opt, fuse=False, settings=NO_BEAM),
        Row("genai", "genai_peer", g32, settings=NO_BEAM),
        Row(f"{I4PY}[genai-int4]", "inference4py_peer", g4, precision="int4", ref=None, settings=NO_BEAM),
        Row("genai[int4]", "genai_peer", g4, precision="int4", ref=f"{I4PY}[genai-int4]", settings=NO_BEAM),
        *openvino_rows(name),
        *openvino_ep_rows(opt, g4, fp32_ref=f"{I4PY}[unfused]"),
    )
    return Model(name, SMOLLM2_PROMPT, 128, rows, build_hint="python tools/build_real.py", iters=2)


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
    if "," in key:
        return [m for k in key.split(",") if k.strip() for m in resolve(k.strip())]
    if key == "smollm2":
        return [smollm2()]
    if key in ("qwen2.5-coder", "qwen-coder"):
        return [qwen25_coder()]
    if key in ("gpt2", "llama", "qwen2"):
        return [tiny_decoder(key)]
    if key in ("t5", "bart"):
        return [tiny_seq2seq(key)]
    if key == "tiny":
        return [tiny_decoder(k) for k in ("gpt2", "llama", "qwen2")] + [tiny_seq2seq(k) for k in ("t5", "bart")]
    if key == "all":
        return resolve("tiny") + resolve("smollm2")
    raise SystemExit(
        f"unknown model {key!r}: use smollm2, qwen2.5-coder, tiny, gpt2, llama, qwen2, t5, bart, all or a comma list"
    )
