"""whisper.cpp's ``ggml-*.bin`` model files, read without whisper.cpp.

Layout (little endian, no padding; whisper.cpp's legacy format, as its converters write it)::

    i32 magic 0x67676d6c ("ggml")
    i32 n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
        n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
    i32 n_mel, i32 n_fft, f32[n_mel * n_fft]        the mel filters
    i32 n_tokens, n_tokens x (u32 length, bytes)     the text tokens, in rank order
    until the end: i32 n_dims, i32 name length, i32 type, i32[n_dims] ne (fastest first), name, data

Tensors carry OpenAI's checkpoint names (``encoder.blocks.0.attn.query.weight``...).  A tensor's type
is ggml's (0 f32, 1 f16, 2 q4_0, 3 q4_1, 6 q5_0, 7 q5_1, 8 q8_0, 10-14 the K-quants); a quantized
matrix keeps its blocks' bytes as stored (:class:`~inference4py.speech.files.weights.BlockRows`, what
the compiled operators multiply) and, unpacked only when asked, their codes and per-block scales
(:mod:`inference4py.gguf.blocks` reads the blocks), so the converted graph computes with exactly the
numbers whisper.cpp dequantizes.  The file carries
no suppress list, alignment heads or tokenizer: :mod:`~inference4py.speech.files.vocabulary` builds
the tokenizer and OpenAI's suppress lists from the text tokens; alignment heads fall back to the
second half of the decoder's heads (transformers' default).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.errors import ModelLoadError, UnsupportedModelError
from inference4py.gguf.blocks import block_bytes, unpack
from inference4py.speech.files.weights import BlockRows, Dims, Lazy, Matrix, WhisperWeights

__all__ = ["GGML_TYPES", "HPARAMS", "MAGIC", "read_ggml"]

MAGIC = 0x67676D6C
_TYPES = {  # ggml.h's enum ggml_type
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    6: "Q5_0",
    7: "Q5_1",
    8: "Q8_0",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q4_K",
    13: "Q5_K",
    14: "Q6_K",
}
GGML_TYPES = {kind: code for code, kind in _TYPES.items()}  # "Q8_0" -> 8
HPARAMS = (
    "n_vocab",
    "n_audio_ctx",
    "n_audio_state",
    "n_audio_head",
    "n_audio_layer",
    "n_text_ctx",
    "n_text_state",
    "n_text_head",
    "n_text_layer",
    "n_mels",
    "ftype",
)
_HOW_TO_FIX = "Download the ggml file again, or convert it again with whisper.cpp's models/convert-*-to-ggml.py."


class _File:
    """A cursor over the mapped file with clear errors for a file that ends too soon."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data = np.memmap(path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"Cannot read {path}: {exc}. {_HOW_TO_FIX}") from exc
        self.pos = 0

    def take(self, n: int, what: str) -> np.ndarray:
        if n < 0 or self.pos + n > self.data.size:
            raise ModelLoadError(
                f"{self.path} is truncated: {what} at byte {self.pos} needs {n} bytes but the file has "
                f"{self.data.size}. {_HOW_TO_FIX}"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def ints(self, count: int, what: str, fmt: str = "i") -> tuple[int, ...]:
        raw = self.take(4 * count, what)
        return struct.unpack_from(f"<{count}{fmt}", raw.tobytes())

    @property
    def done(self) -> bool:
        return self.pos >= self.data.size


def _tensor(f: _File) -> tuple[str, str, tuple[int, ...], np.ndarray]:
    n_dims, name_len, code = f.ints(3, "a tensor header")
    if not 1 <= n_dims <= 4 or not 0 < name_len < 512:
        raise ModelLoadError(
            f"{f.path}: a tensor header at byte {f.pos - 12} is not valid (dims {n_dims}). {_HOW_TO_FIX}"
        )
    ne = f.ints(n_dims, "a tensor's dims")
    name = bytes(f.take(name_len, "a tensor's name")).decode("utf-8", errors="replace")
    kind = _TYPES.get(code)
    if kind is None:
        raise UnsupportedModelError(
            f"{f.path}: tensor {name} has ggml type {code}, which this converter does not read "
            f"(it reads {', '.join(_TYPES.values())})."
        )
    shape = tuple(reversed(ne))  # ggml lists the fastest dimension first
    count = int(np.prod(shape, dtype=np.int64))
    if kind in ("F32", "F16"):
        dtype = np.dtype("<f4" if kind == "F32" else "<f2")
        data: np.ndarray = f.take(count * dtype.itemsize, name).view(dtype).reshape(shape)
    else:
        values, size = block_bytes(kind)
        if ne[0] % values:
            raise ModelLoadError(f"{f.path}: {name}'s rows ({ne[0]}) are not whole {kind} blocks. {_HOW_TO_FIX}")
        data = f.take(count // values * size, name).reshape(-1, ne[0] // values * size)
    return name, kind, shape, data


def _matrix(kind: str, shape: tuple[int, ...], data: np.ndarray) -> Matrix:
    if kind in ("F32", "F16"):
        return Matrix(data)
    blocks = unpack(kind, data)
    fits = blocks.codes.min() >= -128 and blocks.codes.max() < 128  # every type's codes do: a byte each on disk
    codes = blocks.codes.astype(np.int8) if fits else blocks.codes
    return Matrix(codes.reshape(shape), scales=blocks.scales, minimums=blocks.minimums, block=blocks.block)


class _Tensors:
    """The file's tensors by OpenAI name: kind, shape and raw data, turned into matrices when asked."""

    def __init__(self, found: dict[str, tuple[str, tuple[int, ...], np.ndarray]], path: Path) -> None:
        self.found = found
        self.path = path
        self.used: set[str] = set()

    def get(self, name: str) -> tuple[str, tuple[int, ...], np.ndarray]:
        if name not in self.found:
            raise UnsupportedModelError(
                f"{self.path} has no tensor {name!r}: it is not a Whisper model in whisper.cpp's layout."
            )
        self.used.add(name)
        return self.found[name]

    def matrix(self, name: str) -> Matrix | Lazy:
        kind, shape, data = self.get(name)
        if kind in ("F32", "F16"):
            return Matrix(data)
        blocks = BlockRows(GGML_TYPES[kind], (data,)) if len(shape) == 2 else None
        return Lazy(shape, lambda: _matrix(kind, shape, data), blocks)

    def vector(self, name: str, length: int | None = None) -> np.ndarray:
        """A bias / norm (``length`` values: whisper.cpp stores conv biases as ``[n, 1]``) or a table, as float32."""
        kind, shape, data = self.get(name)
        values = np.asarray(data, dtype=np.float32) if kind in ("F32", "F16") else _matrix(kind, shape, data).float32()
        if length is None:
            return values
        if values.size != length:
            raise ModelLoadError(f"{self.path}: {name} has {values.size} values, not {length}. {_HOW_TO_FIX}")
        return values.reshape(length)

    def stacked(self, names: list[str]) -> Lazy:
        """Rows of several matrices (q, k, v), unpacked only when written."""
        parts = [self.get(n) for n in names]
        widths = [dims[1:] for _, dims, _ in parts]
        if len(set(widths)) != 1:  # the rows add up only when the widths agree: a damaged file
            listed = ", ".join(f"{n} {list(dims)}" for n, (_, dims, _) in zip(names, parts))
            raise ModelLoadError(f"{self.path}: {listed} should be rows of one width. {_HOW_TO_FIX}")
        shape = (sum(p[1][0] for p in parts), *widths[0])
        kinds = {kind for kind, _, _ in parts}
        alike = len(kinds) == 1 and not kinds & {"F32", "F16"} and len(shape) == 2
        blocks = BlockRows(GGML_TYPES[parts[0][0]], tuple(d for _, _, d in parts)) if alike else None
        return Lazy(shape, lambda: Matrix.stack([_matrix(k, s, d) for k, s, d in parts]), blocks)


def read_ggml(path: str | Path) -> tuple[WhisperWeights, dict[str, Any], dict[str, Any]]:
    """The weights, a tokenizer.json and the generation settings (CTranslate2's config names) of a ggml file.

    Raises:
        ModelLoadError: not a whisper.cpp file, or a truncated / damaged one.
        UnsupportedModelError: a layout or tensor type this converter does not read.
    """
    from tokenizers import Tokenizer

    from inference4py.speech.files.settings import special_ids
    from inference4py.speech.files.vocabulary import WHISPER_LANGUAGES, special_tokens, suppress_lists, tokenizer_json

    path = Path(path)
    f = _File(path)
    (magic,) = f.ints(1, "the magic number", "I")
    if magic != MAGIC:
        raise ModelLoadError(f"{path} does not start with 'ggml': it is not a whisper.cpp model file. {_HOW_TO_FIX}")
    hp = dict(zip(HPARAMS, f.ints(len(HPARAMS), "the header")))
    if min(hp[k] for k in HPARAMS[:10]) <= 0:
        raise ModelLoadError(f"{path}: the header holds a size of zero or less ({hp}). {_HOW_TO_FIX}")
    n_mel, n_fft = f.ints(2, "the mel filters' shape")
    f.take(4 * n_mel * n_fft, "the mel filters")  # Whisper's own filters: the library computes the same
    (n_tokens,) = f.ints(1, "the token count")
    if not 0 < n_tokens < hp["n_vocab"]:
        raise ModelLoadError(f"{path}: {n_tokens} text tokens for a vocabulary of {hp['n_vocab']}. {_HOW_TO_FIX}")
    tokens = []
    for i in range(n_tokens):
        (length,) = f.ints(1, f"token {i}'s length", "I")
        tokens.append(bytes(f.take(length, f"token {i}")))
    found: dict[str, tuple[str, tuple[int, ...], np.ndarray]] = {}
    while not f.done:
        name, kind, shape, data = _tensor(f)
        found[name] = (kind, shape, data)
    t = _Tensors(found, path)
    d_audio, d_text = hp["n_audio_state"], hp["n_text_state"]
    if d_audio != d_text:
        raise UnsupportedModelError(f"{path}: encoder width {d_audio} differs from decoder width {d_text}.")
    tensors: dict[str, Matrix | Lazy | np.ndarray] = {}

    def linear(openai: str, ours: str, width: int, bias: bool = True) -> None:
        tensors[f"{ours}.weight"] = t.matrix(f"{openai}.weight")
        tensors[f"{ours}.bias"] = t.vector(f"{openai}.bias", width) if bias else np.zeros(width, np.float32)

    def norm(openai: str, ours: str) -> None:
        tensors[f"{ours}.weight"] = t.vector(f"{openai}.weight", d_text)
        tensors[f"{ours}.bias"] = t.vector(f"{openai}.bias", d_text)

    def attention(openai: str, ours: str) -> None:
        names = [f"{openai}.{p}.weight" for p in ("query", "key", "value")]
        tensors[f"{ours}.qkv.weight"] = t.stacked(names)
        zeros = np.zeros(d_text, np.float32)  # Whisper's key projection has no bias
        tensors[f"{ours}.qkv.bias"] = np.concatenate(
            [t.vector(f"{openai}.query.bias", d_text), zeros, t.vector(f"{openai}.value.bias", d_text)]
        )
        linear(f"{openai}.out", f"{ours}.out", d_text)

    for i in (1, 2):
        tensors[f"encoder.conv{i}.weight"] = t.matrix(f"encoder.conv{i}.weight")
        tensors[f"encoder.conv{i}.bias"] = t.vector(f"encoder.conv{i}.bias", d_audio)
    tensors["encoder.positions"] = t.vector("encoder.positional_embedding")
    norm("encoder.ln_post", "encoder.norm")
    for i in range(hp["n_audio_layer"]):
        o, ours = f"encoder.blocks.{i}", f"encoder.layers.{i}"
        attention(f"{o}.attn", f"{ours}.attn")
        norm(f"{o}.attn_ln", f"{ours}.attn_norm")
        ffn = t.get(f"{o}.mlp.0.weight")[1][0]
        linear(f"{o}.mlp.0", f"{ours}.fc1", ffn)
        linear(f"{o}.mlp.2", f"{ours}.fc2", d_audio)
        norm(f"{o}.mlp_ln", f"{ours}.ffn_norm")
    tensors["decoder.embeddings"] = t.matrix("decoder.token_embedding.weight")
    tensors["decoder.positions"] = t.vector("decoder.positional_embedding")
    norm("decoder.ln", "decoder.norm")
    for i in range(hp["n_text_layer"]):
        o, ours = f"decoder.blocks.{i}", f"decoder.layers.{i}"
        attention(f"{o}.attn", f"{ours}.attn")
        norm(f"{o}.attn_ln", f"{ours}.attn_norm")
        linear(f"{o}.cross_attn.query", f"{ours}.cross.q", d_text)
        tensors[f"{ours}.cross.kv.weight"] = t.stacked([f"{o}.cross_attn.key.weight", f"{o}.cross_attn.value.weight"])
        tensors[f"{ours}.cross.kv.bias"] = np.concatenate(
            [np.zeros(d_text, np.float32), t.vector(f"{o}.cross_attn.value.bias", d_text)]
        )
        linear(f"{o}.cross_attn.out", f"{ours}.cross.out", d_text)
        norm(f"{o}.cross_attn_ln", f"{ours}.cross_norm")
        ffn = t.get(f"{o}.mlp.0.weight")[1][0]
        linear(f"{o}.mlp.0", f"{ours}.fc1", ffn)
        linear(f"{o}.mlp.2", f"{ours}.fc2", d_text)
        norm(f"{o}.mlp_ln", f"{ours}.ffn_norm")
    left = sorted(set(found) - t.used)
    if left:
        raise UnsupportedModelError(f"{path}: tensors this converter does not know: {', '.join(left[:8])}.")
    dims = Dims(
        n_mels=hp["n_mels"],
        d_model=d_text,
        encoder_layers=hp["n_audio_layer"],
        decoder_layers=hp["n_text_layer"],
        encoder_heads=hp["n_audio_head"],
        decoder_heads=hp["n_text_head"],
        encoder_ffn=t.get("encoder.blocks.0.mlp.0.weight")[1][0],
        decoder_ffn=t.get("decoder.blocks.0.mlp.0.weight")[1][0],
        source_positions=hp["n_audio_ctx"],
        target_positions=hp["n_text_ctx"],
        vocab_size=hp["n_vocab"],
    )
    formats = {name: kind for name, (kind, shape, _) in found.items() if len(shape) > 1}
    weights = WhisperWeights(dims, tensors, source=str(path), formats=formats)
    weights.check()
    specials = special_tokens(n_tokens, hp["n_vocab"], list(WHISPER_LANGUAGES))
    tokenizer = tokenizer_json(tokens, specials)
    ids = special_ids({s: n_tokens + i for i, s in enumerate(specials)}, str(path))
    suppress, begin = suppress_lists(Tokenizer.from_str(json.dumps(tokenizer)), ids)
    languages = [n_tokens + i for i, s in enumerate(specials) if ids["sot"] < n_tokens + i < ids["translate"]]
    carried = {"suppress_ids": suppress, "suppress_ids_begin": begin, "lang_ids": languages}
    return weights, tokenizer, carried
