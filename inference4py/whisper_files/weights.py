"""A Whisper model's weights as a file holds them, whatever the file's format.

The readers (:mod:`~inference4py.whisper_files.ct2`, :mod:`~inference4py.whisper_files.ggml`) map
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
divisor, CTranslate2's int8) so that the graph can compute with exactly those numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from inference4py.errors import ModelLoadError

__all__ = ["Dims", "Matrix", "WhisperWeights"]


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
    """A weight as stored: ``values`` (float32 / float16, or integer codes), and for codes the
    per-row ``divisor`` (the weight is ``values / divisor[row]``)."""

    values: np.ndarray
    divisor: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.values.shape)

    def float32(self) -> np.ndarray:
        """The exact float32 numbers (float16 widened, codes divided as the format defines)."""
        if self.divisor is None:
            return np.asarray(self.values, dtype=np.float32)
        rows = self.values.reshape(self.values.shape[0], -1).astype(np.float32)
        return (rows / self.divisor[:, None]).reshape(self.values.shape)


@dataclass(frozen=True)
class WhisperWeights:
    """Every tensor of one Whisper model (see the module docstring for the names)."""

    dims: Dims
    tensors: Mapping[str, Matrix | np.ndarray]
    source: str = ""
    notes: dict[str, str] = field(default_factory=dict)

    def matrix(self, name: str) -> Matrix:
        value = self.tensors[name]
        return value if isinstance(value, Matrix) else Matrix(np.asarray(value))

    def vector(self, name: str) -> np.ndarray:
        """A bias, norm or position table as float32 (exact: float16 and bfloat16 widen without rounding)."""
        value = self.tensors[name]
        if isinstance(value, Matrix):
            return value.float32()
        return np.asarray(value, dtype=np.float32)

    @property
    def tied(self) -> bool:
        """Whether the output projection is the embedding table."""
        return "decoder.projection" not in self.tensors

    def storage(self) -> list[str]:
        """The storage types of the matrices, for the folder's provenance (``float16``, ``int8``...)."""
        return sorted({v.values.dtype.name for v in self.tensors.values() if isinstance(v, Matrix)})

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
            got = tuple(
                np.shape(self.tensors[name].values if isinstance(self.tensors[name], Matrix) else self.tensors[name])
            )  # type: ignore[union-attr]
            if got != shape:
                raise ModelLoadError(
                    f"{self.source}: {name} has shape {got}, but the model's dimensions ({d}) need {shape}. The file "
                    "is damaged or not a Whisper model."
                )
        for heads, side in ((d.encoder_heads, "encoder"), (d.decoder_heads, "decoder")):
            if heads <= 0 or d.d_model % heads:
                raise ModelLoadError(f"{self.source}: {heads} {side} heads do not divide d_model {d.d_model}.")
