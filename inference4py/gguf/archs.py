"""The GGUF architectures the graph builder knows: one small described entry each.

Every entry says how its llama.cpp file differs from the shared decoder (pre-norm blocks,
grouped-query attention with rotary positions, a gated MLP).  What a file shows by itself is
not described here but read from it: q/k/v biases, q/k norms, post-attention / post-MLP norms,
fused qkv or gate+up matrices, a separate output matrix and rotary frequency factors are used
when their tensors are present.
The rules are llama.cpp's (``src/llama-model.cpp``), which is what a GGUF file means.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ARCHITECTURES", "Architecture", "supported_architectures"]


def _never(layer: int) -> bool:
    return False


def _even_layers(layer: int) -> bool:  # Gemma 2: local, global, local, global...
    return layer % 2 == 0


def _five_of_six(layer: int) -> bool:  # Gemma 3: five local layers, then one global
    return (layer + 1) % 6 != 0


@dataclass(frozen=True)
class Architecture:
    """How one ``general.architecture`` maps onto the shared decoder graph.

    Attributes:
        name: GGUF architecture name (``general.architecture``).
        model_type: transformers ``model_type`` written to config.json.
        hf_class: transformers class name written to config.json's ``architectures``.
        permuted_qk: llama.cpp's converter reorders the rows of attn_q / attn_k for interleaved
            rotary pairs; they are put back in the half-split order GroupQueryAttention uses.
        activation: the MLP gate's activation, ``"silu"`` or ``"gelu_tanh"``.
        embed_scale: the embeddings are multiplied by sqrt(hidden_size) (Gemma).
        sliding: which layers attend over the ``attention.sliding_window`` only (when the file has one).
        local_rope_base: rotary base of the sliding layers (None: the file's ``rope.freq_base``).
        softcapping: the file carries ``attn_logit_softcapping`` / ``final_logit_softcapping``.
        big_query_scale_layers: block counts of the variants whose attention scale is
            1/sqrt(hidden/heads) instead of 1/sqrt(head_dim) (Gemma 2 and 3 27B, as llama.cpp decides).
        experts_norm: in a mixture-of-experts layer (a file with ``ffn_gate_inp``), the top-k softmax
            weights are divided by their sum (transformers' ``norm_topk_prob``).  GGUF has no key for it
            on these architectures: llama.cpp fixes it per architecture, and so does this entry.
        shared_expert_gate: every mixture-of-experts layer also has a shared expert (``*_shexp``) whose
            output is scaled by ``sigmoid(x @ ffn_gate_inp_shexp)`` (Qwen2-MoE).
        experts_from_file: the routing is described by the file's keys, as llama.cpp reads them for
            DeepSeek-V2: ``expert_weights_norm`` (renormalise), ``expert_weights_scale`` (the routed
            scaling factor), ``leading_dense_block_count`` (dense first layers) and
            ``expert_shared_count`` (shared experts, ungated).
        mla: multi-head latent attention (:mod:`inference4py.gguf.mla`) instead of grouped-query attention.
        granite_scales: Granite's four scalars, read from the file (:class:`~inference4py.gguf.hyper.Hyper`):
            ``embedding_scale`` (the embeddings multiplied by it), ``residual_scale`` (each block's attention
            and MLP output multiplied by it before the residual add), ``attention.scale`` (the attention
            scale) and ``logit_scale`` (the logits divided by it).
        topk_softmax: the routing weights are the softmax of the k chosen router logits (GraniteMoe's
            ``GraniteMoeTopKGating``, gpt-oss's router; the same numbers as a renormalised top-k of the softmax).
        ffn_norm: the name of the norm before the feed-forward part (``blk.N.<ffn_norm>.weight``): gpt-oss's is
            ``post_attention_norm``, which on Gemma is the attention output's own norm.
        oai_experts: gpt-oss's experts (:mod:`inference4py.gguf.gptoss`): a router with a bias (routed by
            ``topk_softmax``), experts with biases, the clamped SwiGLU.
        yarn: the file's YaRN rotary scaling is read (``rope.scaling.type`` yarn), on the rotary tables.
        yarn_truncate: YaRN's ramp ends are rounded down and up.  GGUF has no key for it: gpt-oss's config
            (and OpenAI's reference code) leave them as computed; llama.cpp always rounds them.
    """

    name: str
    model_type: str
    hf_class: str
    permuted_qk: bool = False
    activation: str = "silu"
    embed_scale: bool = False
    sliding: Callable[[int], bool] = _never
    local_rope_base: float | None = None
    softcapping: bool = False
    big_query_scale_layers: tuple[int, ...] = ()
    experts_norm: bool = False
    shared_expert_gate: bool = False
    experts_from_file: bool = False
    mla: bool = False
    granite_scales: bool = False
    topk_softmax: bool = False
    ffn_norm: str = "ffn_norm"
    oai_experts: bool = False
    yarn: bool = False
    yarn_truncate: bool = True


_ENTRIES = (
    # SmolLM2, TinyLlama, Llama 3; Mixtral is "llama" with experts (renormalised top-k)
    Architecture("llama", "llama", "LlamaForCausalLM", permuted_qk=True, experts_norm=True),
    Architecture("mistral", "mistral", "MistralForCausalLM", permuted_qk=True),
    Architecture("qwen2", "qwen2", "Qwen2ForCausalLM"),  # q/k/v biases: read from the file
    Architecture("qwen3", "qwen3", "Qwen3ForCausalLM"),  # q/k norms: read from the file
    # fused attn_qkv and gate+up (ffn_up) matrices: read from the file; llama.cpp ignores Phi-3's window
    Architecture("phi3", "phi3", "Phi3ForCausalLM"),
    Architecture(
        "gemma2",
        "gemma2",
        "Gemma2ForCausalLM",
        activation="gelu_tanh",
        embed_scale=True,
        sliding=_even_layers,
        softcapping=True,
        big_query_scale_layers=(46,),
    ),
    Architecture(
        "gemma3",
        "gemma3_text",
        "Gemma3ForCausalLM",
        activation="gelu_tanh",
        embed_scale=True,
        sliding=_five_of_six,
        local_rope_base=10_000.0,
        big_query_scale_layers=(62,),
    ),
    # mixture-of-experts decoders (inference4py.gguf.moe); Mixtral is "llama" with experts
    Architecture("qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", experts_norm=True),
    Architecture("qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM", shared_expert_gate=True),
    Architecture("olmoe", "olmoe", "OlmoeForCausalLM"),  # q/k norms over all heads at once: read from the file
    # DeepSeek-V2 / V2-Lite: latent attention (inference4py.gguf.mla), dense first layers, then experts
    Architecture("deepseek2", "deepseek_v2", "DeepseekV2ForCausalLM", experts_from_file=True, mla=True),
    # IBM Granite 3.x: llama with four scalars; experts route by a softmax of the top-k logits (llama.cpp's
    # granite graph has the same MoE branch as granitemoe's), and a file with expert_shared_feed_forward_length
    # (GraniteMoeShared) adds an ungated shared expert
    Architecture("granite", "granite", "GraniteForCausalLM", permuted_qk=True, granite_scales=True, topk_softmax=True),
    Architecture(
        "granitemoe", "granitemoe", "GraniteMoeForCausalLM", permuted_qk=True, granite_scales=True, topk_softmax=True
    ),
    # gpt-oss: sliding window on even layers, attention sinks and q/k/v/o biases (read from the file), YaRN;
    # the norm before the experts is named post_attention_norm
    Architecture(
        "gpt-oss",
        "gpt_oss",
        "GptOssForCausalLM",
        sliding=_even_layers,
        ffn_norm="post_attention_norm",
        oai_experts=True,
        topk_softmax=True,
        yarn=True,
        yarn_truncate=False,
    ),
)
ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in _ENTRIES}


def supported_architectures() -> tuple[str, ...]:
    return tuple(ARCHITECTURES)
