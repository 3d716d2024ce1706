"""The shape of a GGUF decoder, read from its metadata, and the config.json that describes it.

:class:`Hyper` gathers what the graph builder needs (sizes, rotary settings, sliding windows,
soft-capping) from the file's ``<arch>.*`` keys and the architecture's entry in
:mod:`~inference4py.gguf.archs`; :func:`hf_config` writes it back with transformers' names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference4py.errors import ModelLoadError, UnsupportedModelError
from inference4py.gguf.archs import ARCHITECTURES, Architecture, supported_architectures
from inference4py.gguf.reader import GGUFFile

__all__ = ["MAX_ROPE_POSITIONS", "Hyper", "Yarn", "hf_config", "read_hyper", "read_yarn", "rope_caches"]

MAX_ROPE_POSITIONS = 131_072  # cos/sin caches beyond this would only cost memory


@dataclass(frozen=True)
class Yarn:
    """YaRN rotary scaling, from the file's ``rope.scaling.*`` keys (llama.cpp's names).

    DeepSeek-V2 files carry ``yarn_log_multiplier`` (``0.1 x mscale_all_dim``): their attention logits are
    multiplied by ``mscale^2`` (:attr:`mscale`, applied by :mod:`inference4py.gguf.mla`) and the rotary tables
    are not scaled.  Without it (gpt-oss) the tables are multiplied by ``0.1 x ln(factor) + 1``
    (:attr:`attention_factor`), as transformers' ``_compute_yarn_parameters`` and llama.cpp's rope compute it,
    which scales the logits by its square.  ``truncate`` rounds the ramp's ends down and up (llama.cpp always,
    transformers unless the config says ``truncate: false``, as gpt-oss's does)."""

    factor: float
    original: int  # original_context_length: positions the model was trained on before scaling
    mscale_all_dim: float | None  # yarn_log_multiplier / 0.1 (llama.cpp's converter writes 0.1 x mscale_all_dim)
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    ext_factor: float = 1.0
    truncate: bool = True

    @property
    def mscale(self) -> float:
        """DeepSeek's: the attention logits' factor is its square (``softmax_scale *= mscale * mscale``)."""
        return 1.0 + 0.1 * (self.mscale_all_dim or 0.0) * math.log(self.factor)

    @property
    def attention_factor(self) -> float:
        """What cos and sin are multiplied by: 1 with DeepSeek's ``mscale_all_dim``, else ``0.1 ln(factor) + 1``."""
        if self.mscale_all_dim is not None or self.factor <= 1.0:
            return 1.0
        return 0.1 * math.log(self.factor) + 1.0

    def caches(self, rope: int, base: float, positions: int) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin ``[positions, rope / 2]``: each pair's frequency blended between the original
        (extrapolated) and the one divided by ``factor`` (interpolated) by YaRN's ramp, as llama.cpp's
        ``rope_yarn`` and transformers' ``_compute_yarn_parameters`` compute it (in float32, as transformers)."""

        def corr_dim(rotations: float) -> float:
            return rope * math.log(self.original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = corr_dim(self.beta_fast), corr_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(0.0, low), min(rope - 1.0, high)
        powers = (np.float32(base) ** (np.arange(0, rope, 2).astype(np.float32) / np.float32(rope))).astype(np.float32)
        extrapolated = (1.0 / powers).astype(np.float32)
        interpolated = (1.0 / (np.float32(self.factor) * powers)).astype(np.float32)
        ramp = np.clip((np.arange(rope // 2, dtype=np.float32) - low) / max(high - low, 0.001), 0, 1)
        keep = ((1 - ramp) * self.ext_factor).astype(np.float32)  # 1: the original frequency, 0: interpolated
        inv_freq = (interpolated * (1 - keep) + extrapolated * keep).astype(np.float32)
        freqs = np.outer(np.arange(positions, dtype=np.float32), inv_freq).astype(np.float32)
        factor = np.float32(self.attention_factor)
        return (np.cos(freqs) * factor).astype(np.float32), (np.sin(freqs) * factor).astype(np.float32)


def read_yarn(gguf: GGUFFile, *, truncate: bool = True) -> Yarn | None:
    """The file's YaRN scaling (None without one); UnsupportedModelError for an ``attn_factor`` other than 1."""
    if gguf.get(".rope.scaling.type") != "yarn":
        return None
    for key in (".rope.scaling.attn_factor", ".rope.scaling.yarn_attn_factor"):
        attn_factor = float(gguf.get(key, 1.0) or 1.0)
        if attn_factor != 1.0:
            raise UnsupportedModelError(
                f"{gguf.path}: {gguf.architecture}{key} = {attn_factor}; the converter's YaRN takes 1."
            )
    log_mul = gguf.get(".rope.scaling.yarn_log_multiplier")
    return Yarn(
        factor=float(gguf.require(".rope.scaling.factor")),
        original=int(gguf.require(".rope.scaling.original_context_length")),
        mscale_all_dim=float(log_mul) / 0.1 if log_mul else None,
        beta_fast=float(gguf.get(".rope.scaling.yarn_beta_fast", 32.0) or 32.0),
        beta_slow=float(gguf.get(".rope.scaling.yarn_beta_slow", 1.0) or 1.0),
        ext_factor=float(gguf.get(".rope.scaling.yarn_ext_factor", 1.0) or 1.0),
        truncate=truncate,
    )


@dataclass(frozen=True)
class Hyper:
    """The decoder's shape and constants, read from the GGUF metadata."""

    arch: Architecture
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    vocab: int
    context: int
    eps: float
    rope_base: float
    rope_linear_factor: float
    sliding_window: int | None
    attn_softcap: float
    final_softcap: float
    scale: float
    tied: bool
    embedding_scale: float = 1.0  # Granite: the embeddings times it
    residual_scale: float = 1.0  # Granite: each block's attention and MLP outputs times it, before the residual add
    logit_scale: float = 1.0  # Granite: the logits divided by it
    yarn: Yarn | None = None  # YaRN on the grouped-query attention's rotary tables (gpt-oss; MLA reads its own)

    def is_sliding(self, layer: int) -> bool:
        return self.sliding_window is not None and self.arch.sliding(layer)


def _int(gguf: GGUFFile, key: str, default: int | None = None) -> int:
    value = gguf.get(key, default) if default is not None else gguf.require(key)
    if isinstance(value, (list, tuple)):  # per-layer values (some files): all must agree here
        if len(set(value)) != 1:
            raise UnsupportedModelError(
                f"{gguf.path}: {gguf.architecture}{key} differs between layers ({sorted(set(value))[:4]}); "
                "the converter builds decoders whose layers share one shape."
            )
        value = value[0]
    return int(value)


def read_hyper(gguf: GGUFFile) -> Hyper:
    """The decoder's hyper-parameters; UnsupportedModelError for architectures or features not handled."""
    name = gguf.architecture
    arch = ARCHITECTURES.get(name)
    if arch is None:
        raise UnsupportedModelError(
            f"{gguf.path} holds a {name!r} model; the GGUF converter builds {', '.join(supported_architectures())}. "
            "Use an ONNX export of this model instead (optimum-cli export onnx, or onnxruntime-genai's builder)."
        )
    hidden = _int(gguf, ".embedding_length")
    heads = _int(gguf, ".attention.head_count")
    kv_heads = _int(gguf, ".attention.head_count_kv", heads)
    head_dim = _int(gguf, ".attention.key_length", hidden // heads)
    if not arch.mla and _int(gguf, ".attention.value_length", head_dim) != head_dim:  # MLA: gguf/mla.py reads them
        raise UnsupportedModelError(f"{gguf.path}: keys and values of different sizes are not supported.")
    if head_dim % 16 and not arch.mla:
        raise UnsupportedModelError(
            f"{gguf.path}: heads of {head_dim} values; onnxruntime's GroupQueryAttention, which the converted "
            "graph uses, needs a multiple of 16. Use an ONNX export of this model instead (optimum-cli export onnx)."
        )
    rotary_dim = _int(gguf, ".rope.dimension_count", head_dim)
    layers = _int(gguf, ".block_count")
    embed = gguf.info("token_embd.weight")
    scaling = gguf.get(".rope.scaling.type")
    factor = float(gguf.get(".rope.scaling.factor", 1.0) or 1.0)
    if scaling in (None, "none", "") or (scaling == "yarn" and (arch.mla or arch.yarn)):  # read as YaRN below
        factor = 1.0
    elif scaling != "linear":
        raise UnsupportedModelError(
            f"{gguf.path} uses {scaling!r} rotary scaling; the converter supports none and linear "
            "(Llama 3's frequency factors come from the rope_freqs tensor and are supported)"
            + (", and YaRN on deepseek2 and gpt-oss." if scaling == "yarn" else ".")
        )
    if "rope_factors_long.weight" in gguf:
        raise UnsupportedModelError(
            f"{gguf.path} uses long-context rotary factors (rope_factors_long / rope_factors_short, Phi-3 128k); "
            "the converter supports plain, linear and Llama 3 rotary positions. Use a 4k-context variant."
        )
    window = gguf.get(".attention.sliding_window")
    window = int(window) if window else None
    if window is not None and not any(arch.sliding(i) for i in range(layers)):
        window = None
    # llama.cpp: 1/sqrt(head_dim), except the 27B Gemmas that scale by 1/sqrt(hidden / heads)
    scale_dim = hidden / heads if layers in arch.big_query_scale_layers else head_dim
    softcaps = (
        (
            float(gguf.get(".attn_logit_softcapping", 0.0) or 0.0),
            float(gguf.get(".final_logit_softcapping", 0.0) or 0.0),
        )
        if arch.softcapping
        else (0.0, 0.0)
    )
    granite = _granite_scales(gguf) if arch.granite_scales else {}
    return Hyper(
        arch=arch,
        layers=layers,
        hidden=hidden,
        intermediate=_int(gguf, ".feed_forward_length"),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        vocab=embed.shape[0],
        context=_int(gguf, ".context_length", 2048),
        eps=float(gguf.get(".attention.layer_norm_rms_epsilon", 1e-6)),
        rope_base=float(gguf.get(".rope.freq_base", 10_000.0)),
        rope_linear_factor=factor,
        sliding_window=window,
        attn_softcap=softcaps[0],
        final_softcap=softcaps[1],
        scale=granite.pop("scale", 1.0 / math.sqrt(scale_dim)),
        tied="output.weight" not in gguf,
        **granite,
        yarn=read_yarn(gguf, truncate=arch.yarn_truncate) if arch.yarn else None,
    )


def _granite_scales(gguf: GGUFFile) -> dict[str, float]:
    """Granite's scalars, as llama.cpp reads them: ``logit_scale`` required, the other three optional (an
    absent or zero ``attention.scale`` leaves 1/sqrt(head_dim)); the file's rotary positions must be on."""
    if gguf.get(".rope.scaling.finetuned", True) is False:  # llama.cpp's granite: no rotary positions at all
        raise UnsupportedModelError(
            f"{gguf.path}: {gguf.architecture}.rope.scaling.finetuned = false turns rotary positions off; the "
            "converter builds Granite decoders with rotary positions only."
        )
    scales: dict[str, float] = {}
    for field, key, required in (
        ("logit_scale", ".logit_scale", True),
        ("embedding_scale", ".embedding_scale", False),
        ("residual_scale", ".residual_scale", False),
        ("scale", ".attention.scale", False),
    ):
        raw = gguf.require(key) if required else gguf.get(key)
        try:
            value = None if raw is None else float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if value is not None and not math.isfinite(value):
            raise ModelLoadError(f"{gguf.path}: {gguf.architecture}{key} = {raw!r} is not a finite number.")
        if field == "logit_scale" and value == 0.0:
            raise ModelLoadError(f"{gguf.path}: {gguf.architecture}{key} = 0; the logits are divided by it.")
        if value:  # llama.cpp: a missing or zero optional scale is not applied
            scales[field] = value
    return scales


def hf_config(hp: Hyper, gguf: GGUFFile) -> dict[str, Any]:
    """config.json (transformers' names) describing the graph."""
    config: dict[str, Any] = {
        "model_type": hp.arch.model_type,
        "architectures": [hp.arch.hf_class],
        "hidden_size": hp.hidden,
        "num_hidden_layers": hp.layers,
        "num_attention_heads": hp.heads,
        "num_key_value_heads": hp.kv_heads,
        "head_dim": hp.head_dim,
        "intermediate_size": hp.intermediate,
        "vocab_size": hp.vocab,
        "max_position_embeddings": min(hp.context, MAX_ROPE_POSITIONS),  # the rotary caches' length
        "rms_norm_eps": hp.eps,
        "rope_theta": hp.rope_base,
        "hidden_act": "gelu_pytorch_tanh" if hp.arch.activation == "gelu_tanh" else "silu",
        "tie_word_embeddings": hp.tied,
        "sliding_window": hp.sliding_window,
        "torch_dtype": "float32",
    }
    if hp.rope_linear_factor != 1.0:
        config["rope_scaling"] = {"rope_type": "linear", "factor": hp.rope_linear_factor}
    if hp.yarn is not None:
        config["rope_scaling"] = {
            "rope_type": "yarn",
            "factor": hp.yarn.factor,
            "original_max_position_embeddings": hp.yarn.original,
            "beta_fast": hp.yarn.beta_fast,
            "beta_slow": hp.yarn.beta_slow,
            "truncate": hp.yarn.truncate,
        }
    if hp.arch.local_rope_base is not None:
        config["rope_local_base_freq"] = hp.arch.local_rope_base
    if hp.sliding_window is not None:
        config["layer_types"] = [
            "sliding_attention" if hp.is_sliding(i) else "full_attention" for i in range(hp.layers)
        ]
    if hp.arch.name.startswith("gemma"):
        config["query_pre_attn_scalar"] = round(1.0 / hp.scale**2)
    if hp.arch.granite_scales:
        config |= {
            "embedding_multiplier": hp.embedding_scale,
            "residual_multiplier": hp.residual_scale,
            "attention_multiplier": hp.scale,
            "logits_scaling": hp.logit_scale,
        }
    if hp.arch.softcapping:
        config["attn_logit_softcapping"] = hp.attn_softcap or None
        config["final_logit_softcapping"] = hp.final_softcap or None
    for key, field in (
        ("bos_token_id", "tokenizer.ggml.bos_token_id"),
        ("eos_token_id", "tokenizer.ggml.eos_token_id"),
    ):
        if gguf.get(field) is not None:
            config[key] = int(gguf.get(field))
    return config


def rope_caches(
    hp: Hyper, base: float, linear_factor: float, factors: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin ``[positions, rotary_dim / 2]`` in float32, computed as transformers does (YaRN's where the
    file scales so, :class:`Yarn`)."""
    dim = hp.rotary_dim
    if hp.yarn is not None:
        return hp.yarn.caches(dim, base, min(hp.context, MAX_ROPE_POSITIONS))
    inv_freq = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)))
    inv_freq = inv_freq.astype(np.float32)
    if factors is not None:  # Llama 3's rope_freqs: llama.cpp divides each frequency by its factor
        inv_freq = (inv_freq / factors.astype(np.float32).reshape(-1)[: dim // 2]).astype(np.float32)
    if linear_factor != 1.0:
        inv_freq = (inv_freq / np.float32(linear_factor)).astype(np.float32)
    positions = np.arange(min(hp.context, MAX_ROPE_POSITIONS), dtype=np.float32)
    freqs = np.outer(positions, inv_freq).astype(np.float32)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)
