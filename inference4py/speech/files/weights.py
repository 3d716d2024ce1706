"""A Whisper model's weights as a file holds them, whatever the file's format.

The readers (:mod:`~inference4py.speech.files.ct2`, :mod:`~inference4py.speech.files.ggml`) map
their variables onto one set of names, and the graph builder reads only these:

* ``encoder.conv{1,2}.weight`` ``[d, in, 3]`` / ``.bias``, ``encoder.positions`` ``[source, d]``;
* per layer ``{side}.layers.{i}.attn.qkv`` (self-attention's q, k and v rows stacked, ``[3d, d]``,
  the bias with zeros for k, which Whisper does not have), ``.attn.out``, ``.fc1``, ``.fc2``, and
  for the decoder ``.cross.q``, ``.cross.kv`` (k and v rows stacked) and ``.cross.out``; each
  ``.weight`` (a :class:`Matrix`, ``[out, in]`` as in PyTorch) and ``.bias``;
* LayerNorms ``{...}.attn_norm``, ``.cross_norm``, ``.ffn_norm``, ``encoder.norm``, ``decoder.norm``
  (``.weight`` / ``.bias``);
* ``decoder.embeddings`` ``[vocab, d]``, ``decoder.positions`` ``[target, d]`` and, when the output
  projection is not the embedding table, ``decoder.projection``.

A :class:`Matrix` keeps the stored numbers (float32, float16, or integer codes with a per-row
divisor, CTranslate2's int8) so that the graph can compute with exactly those numbers; a matrix a
whisper.cpp file stores as ggml blocks also keeps those blocks' bytes (:class:`BlockRows`), which the
compiled operators multiply as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from inference4py.errors import ModelLoadError

__all__ = ["BlockRows", "Dims", "Lazy", "Matrix", "WhisperWeights"]


@dataclass(frozen=True)
class Dims:
    """The shape of a Whisper model (transformers' WhisperConfig names in :meth:`config`)."""

    n_mels: int
    d_model: int
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int
    decoder_heads: int
    encoder_ffn: int
    decoder_ffn: int
    source_positions: int
    target_positions: int
    vocab_size: int

    def config(self) -> dict[str, int]:
        """config.json's size fields."""
        return {
            "num_mel_bins": self.n_mels,
            "d_model": self.d_model,
            "encoder_layers": self.encoder_layers,
            "decoder_layers": self.decoder_layers,
            "num_hidden_layers": self.encoder_layers,
            "encoder_attention_heads": self.encoder_heads,
            "decoder_attention_heads": self.decoder_heads,
            "encoder_ffn_dim": self.encoder_ffn,
            "decoder_ffn_dim": self.decoder_ffn,
            "max_source_positions": self.source_positions,
            "max_target_positions": self.target_positions,
            "vocab_size": self.vocab_size,
        }


@dataclass(frozen=True)
class Matrix:
    """A weight as stored: ``values`` (float32 / float16, or integer codes) and, for codes, how they become numbers:

    * ``divisor`` (CTranslate2's int8 / int16): the weight is ``values / divisor[row]``;
    * ``scales`` (and ``minimums``), one per ``block`` values of a row (ggml's blocks): the weight is
      ``values * scale (+ minimum)``, computed in float32 as ggml's own dequantization does.
    """

    values: np.ndarray
    divisor: np.ndarray | None = None
    scales: np.ndarray | None = None  # [rows, cols // block] float32
    minimums: np.ndarray | None = None  # [rows, cols // block] float32
    block: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.values.shape)

    def float32(self) -> np.ndarray:
        """The exact float32 numbers (float16 widened, codes turned into numbers as the format defines)."""
        if self.scales is not None:
            rows = self.values.shape[0]
            out = self.values.reshape(rows, -1, self.block).astype(np.float32) * self.scales[:, :, None]
            if self.minimums is not None:
                out = out + self.minimums[:, :, None]
            return out.reshape(self.values.shape)
        if self.divisor is None:
            return np.asarray(self.values, dtype=np.float32)
        rows = self.values.reshape(self.values.shape[0], -1).astype(np.float32)
        return (rows / self.divisor[:, None]).reshape(self.values.shape)

    @staticmethod
    def stack(parts: list[Matrix]) -> Matrix:
        """The rows of ``parts`` one after the other, still as stored when they are stored alike."""
        first = parts[0]
        alike = {(p.values.dtype, p.divisor is None, p.scales is None, p.minimums is None, p.block) for p in parts}
        if len(alike) != 1:  # mixed storage (rare): the exact float32 numbers
            return Matrix(np.concatenate([p.float32() for p in parts]))

        def rows(arrays: list[np.ndarray | None]) -> np.ndarray | None:
            return None if arrays[0] is None else np.concatenate(arrays)  # type: ignore[arg-type]

        return Matrix(
            np.concatenate([p.values for p in parts]),
            rows([p.divisor for p in parts]),
            rows([p.scales for p in parts]),
            rows([p.minimums for p in parts]),
            first.block,
        )


@dataclass(frozen=True)
class BlockRows:
    """A matrix ``[out, in]`` as rows of ggml blocks, byte for byte as the file stores them.

    ``parts`` are uint8 ``[rows, row bytes]`` (views of the mapped file), one after another (q, k and v
    stacked), all of ggml type ``type_id`` (ggml.h's ``enum ggml_type``: 8 is Q8_0).
    """

    type_id: int
    parts: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class Lazy:
    """A matrix read from the file only when the graph is written (quantized blocks are unpacked one at a time).

    ``blocks``: the matrix's ggml blocks as stored, when the file holds it so (then ``load`` unpacks them).
    """

    shape: tuple[int, ...]
    load: Callable[[], Matrix]
    blocks: BlockRows | None = None


@dataclass(frozen=True)
class WhisperWeights:
    """Every tensor of one Whisper model (see the module docstring for the names)."""

    dims: Dims
    tensors: Mapping[str, Matrix | Lazy | np.ndarray]
    source: str = ""
    formats: dict[str, str] = field(default_factory=dict)  # matrix name -> the file's type name, when it has one

    def matrix(self, name: str) -> Matrix:
        value = self.tensors[name]
        if isinstance(value, Lazy):
            return value.load()
        return value if isinstance(value, Matrix) else Matrix(np.asarray(value))

    def vector(self, name: str) -> np.ndarray:
        """A bias, norm or position table as float32 (exact: float16 and bfloat16 widen without rounding)."""
        value = self.tensors[name]
        if isinstance(value, (Matrix, Lazy)):
            return self.matrix(name).float32()
        return np.asarray(value, dtype=np.float32)

    @property
    def tied(self) -> bool:
        """Whether the output projection is the embedding table."""
        return "decoder.projection" not in self.tensors

    def storage(self) -> list[str]:
        """The storage types of the matrices, for the folder's provenance (``float16``, ``int8``...)."""
        return sorted(
            set(self.formats.values()) or {v.values.dtype.name for v in self.tensors.values() if isinstance(v, Matrix)}
        )

    def check(self) -> None:
        """Every tensor has the shape the dims say.

        Raises:
            ModelLoadError: a tensor of another shape (a damaged or mislabelled file).
        """
        d = self.dims
        want: dict[str, tuple[int, ...]] = {
            "encoder.conv1.weight": (d.d_model, d.n_mels, 3),
            "encoder.conv2.weight": (d.d_model, d.d_model, 3),
            "encoder.positions": (d.source_positions, d.d_model),
            "decoder.embeddings": (d.vocab_size, d.d_model),
            "decoder.positions": (d.target_positions, d.d_model),
        }
        if not self.tied:
            want["decoder.projection"] = (d.vocab_size, d.d_model)
        for side, layers, ffn in (
            ("encoder", d.encoder_layers, d.encoder_ffn),
            ("decoder", d.decoder_layers, d.decoder_ffn),
        ):
            for i in range(layers):
                p = f"{side}.layers.{i}"
                want[f"{p}.attn.qkv.weight"] = (3 * d.d_model, d.d_model)
                want[f"{p}.attn.out.weight"] = (d.d_model, d.d_model)
                want[f"{p}.fc1.weight"] = (ffn, d.d_model)
                want[f"{p}.fc2.weight"] = (d.d_model, ffn)
                if side == "decoder":
                    want[f"{p}.cross.q.weight"] = (d.d_model, d.d_model)
                    want[f"{p}.cross.kv.weight"] = (2 * d.d_model, d.d_model)
                    want[f"{p}.cross.out.weight"] = (d.d_model, d.d_model)
        for name, shape in want.items():
            value = self.tensors[name]
            got = value.shape if isinstance(value, (Matrix, Lazy)) else tuple(np.shape(value))
            if got != shape:
                raise ModelLoadError(
                    f"{self.source}: {name} has shape {got}, but the model's dimensions ({d}) need {shape}. The file "
                    "is damaged or not a Whisper model."
                )
        for heads, side in ((d.encoder_heads, "encoder"), (d.decoder_heads, "decoder")):
            if heads <= 0 or d.d_model % heads:
                raise ModelLoadError(f"{self.source}: {heads} {side} heads do not divide d_model {d.d_model}.")
