"""Random-weight GGUF files with a real model's shapes, for measuring the GGUF converter.

Conversion memory, load time and decoding speed depend on a model's shapes and tensor types, not on
its weight values, so a file of random blocks laid out like a published llama.cpp quantization
measures them without downloading the model::

    python tools/random_gguf.py --shape qwen2.5-1.5b --mix q4_k_m OUT.gguf
    python tools/random_gguf.py --shape llama3-8b --mix q8_0 OUT.gguf
    python tools/random_gguf.py --shape olmoe-1b-7b --mix q4_k_m OUT.gguf   # mixture of experts
    python tools/random_gguf.py --shape gpt-oss-20b --mix mxfp4_moe OUT.gguf  # 11.3 GiB, as ggml-org's file
    python tools/random_gguf.py --shape tiny --mix Q2_K OUT.gguf   # every matrix in one ggml type
    python tools/random_gguf.py --list                     # the shapes and mixes

or, from Python, ``write_random_gguf(path, "tiny", "q4_k_m")``.  The text such a file generates is
gibberish.

Shapes (``SHAPES``), from the published config.json files:

- ``qwen2.5-1.5b``: architecture qwen2, 28 layers, hidden 1536, intermediate 8960, 12 heads / 2 kv
  heads of 128, vocabulary 151936, tied embeddings, q/k/v biases, rope base 1e6, rms eps 1e-6,
  context 32768; tokenizer.ggml.pre ``qwen2``, ChatML template.
- ``llama3-8b``: architecture llama, 32 layers, hidden 4096, intermediate 14336, 32 heads / 8 kv heads
  of 128, vocabulary 128256, a separate output.weight, rope base 500000, rms eps 1e-5, context 8192;
  tokenizer.ggml.pre ``llama-bpe``, Llama 3's template and its 256 special tokens.
- ``olmoe-1b-7b`` (OLMoE-1B-7B-0924): architecture olmoe, 16 layers, hidden 2048, 64 experts of 1024
  rows, 8 chosen per token, 16 heads / 16 kv heads of 128 (no GQA), q/k RMS norms over all heads at once
  (``attn_q_norm`` / ``attn_k_norm`` of 2048), vocabulary 50304, a separate output.weight, rope base
  10000, rms eps 1e-5, context 4096; tokenizer.ggml.pre ``olmo`` (GPT-2-style byte-level BPE), the
  specials ``|||IP_ADDRESS|||``, ``<|padding|>`` (padding), ``|||EMAIL_ADDRESS|||``,
  ``|||PHONE_NUMBER|||``, ``<|endoftext|>`` (bos and eos, id 50279 as in OLMoE's tokenizer; the real one
  has its first two at ids 0 and 1), no chat template (the base model).  As llama.cpp's converter
  writes olmoe, ``feed_forward_length`` is the experts' 1024 rows (llama.cpp's olmoe reads them from it)
  and there is no ``expert_feed_forward_length``.
- ``qwen3-30b-a3b``: architecture qwen3moe, 48 layers, hidden 2048, 128 experts of 768 rows
  (``expert_feed_forward_length``), 8 chosen per token (``norm_topk_prob`` true: qwen3moe renormalises
  the chosen weights, which llama.cpp and inference4py take from the architecture, no key), 32 heads /
  4 kv heads of 128 (``key_length`` / ``value_length`` 128), per-head q/k RMS norms (of 128), vocabulary
  151936, a separate output.weight, rope base 1e6, rms eps 1e-6, context 40960, ``feed_forward_length``
  6144 (config.json's intermediate_size, which no layer uses); tokenizer.ggml.pre ``qwen2``, Qwen2.5's
  specials then ``<tool_response>``, ``</tool_response>``, ``<think>``, ``</think>``, ChatML template.
- ``deepseek-v2-lite``: architecture deepseek2 (multi-head latent attention), 27 layers, hidden 2048,
  16 heads whose queries and keys are 128 + 64 (rotary) wide and values 128, a 512-wide latent
  (``kv_lora_rank``; no query LoRA), ``attn_k_b`` / ``attn_v_b`` as llama.cpp's converter splits
  ``kv_b_proj``, one dense first layer (intermediate 10944), then 64 experts of 1408 rows, 6 chosen per
  token (softmax, not renormalised, scale 1.0) beside 2 shared experts, vocabulary 102400 (100000
  regular tokens here), YaRN (factor 40 over 4096 positions, ``mscale_all_dim`` 0.707), rms eps 1e-6,
  context 163840; tokenizer.ggml.pre ``deepseek-llm``, BOS added, no chat template.
- ``tiny-mla``: deepseek-v2-lite's layout at test size (2 layers, hidden 256, 4 heads of 64 + 32, a
  128-wide latent, 4 experts of 256 rows).
- ``gpt-oss-20b``: architecture gpt-oss, 24 layers, hidden 2880, 32 experts of 2880 rows, 4 chosen per
  token, 64 heads / 8 kv heads of 64 (``key_length`` / ``value_length`` 64), q/k/v/o biases, one attention
  sink per head (``attn_sinks``), a router bias and per-expert biases (``ffn_gate_inp.bias``,
  ``ffn_{gate,up,down}_exps.bias``), the norm before the experts named ``post_attention_norm`` (no
  ``ffn_norm``), a sliding window of 128 (llama.cpp: on even layers), YaRN (factor 32 from 4096 positions,
  beta 32 / 1), rope base 150000, rms eps 1e-5, context 131072, vocabulary 201088, a separate output.weight;
  tokenizer.ggml.pre ``gpt-4o`` (o200k), the harmony specials at their ids (``<|startoftext|>`` 199998 bos,
  ``<|endoftext|>`` 199999 padding, ``<|return|>`` 200002 eos, ``<|constrain|>``, ``<|channel|>``,
  ``<|start|>``, ``<|end|>``, ``<|message|>``, ``<|call|>`` 200012, ``<|endofprompt|>`` 200018, the
  reserved ones between), ``[PAD<i>]`` where the real vocabulary has its other reserved tokens, and a
  shortened harmony chat template.  With the ``mxfp4_moe`` mix it is the layout of ggml-org's
  gpt-oss-20b GGUF (experts MXFP4, every other matrix Q8_0; 12.1 GB).  ``tiny-gpt-oss``: the same layout
  at the tiny sizes, 4 experts of 256 rows, 2 chosen.
- ``tiny`` (qwen2 layout: tied, biases) and ``tiny-llama`` (llama layout: untied): 2 layers, hidden 256,
  intermediate 512, 4 heads / 2 kv heads of 64, vocabulary 1024, for tests.  Hidden 256 (not smaller)
  keeps every matrix row a whole number of 256-value K-quant blocks, so the tiny files hold the same
  tensor types as the big ones.  ``tiny-moe`` (qwen3moe layout: per-head q/k norms, untied): the same
  sizes with 4 experts of 256 rows, 2 chosen per token.

A mixture-of-experts layer holds, in place of ``ffn_gate`` / ``ffn_up`` / ``ffn_down``, the router
``ffn_gate_inp`` ``[experts, hidden]`` and the 3-D expert tensors ``ffn_gate_exps`` / ``ffn_up_exps``
``[experts, expert rows, hidden]`` and ``ffn_down_exps`` ``[experts, hidden, expert rows]`` (numpy order;
ggml's is reversed), with ``<arch>.expert_count`` and ``<arch>.expert_used_count``.

Mixes (``MIXES``):

- ``q8_0``: every matrix Q8_0 (the token embedding, output and 3-D expert tensors included, as
  llama.cpp's Q8_0 does); norms, biases and routers F32.
- ``q4_k_m``: llama.cpp's Q4_K_M rule (``llama_tensor_get_type`` in ``src/llama-quant.cpp``): Q4_K by
  default; ``attn_v`` and ``ffn_down`` Q6_K on the layers where ``use_more_bits(i, n)`` holds, that is
  ``i < n/8 or i >= 7*n/8 or (i - n/8) % 3 == 2`` (integer division: the first and last eighth of the
  layers and every third one between); ``output.weight`` Q6_K, and so is ``token_embd.weight`` when the
  embeddings are tied (llama.cpp quantizes a tied embedding as the output), else Q4_K; a matrix whose
  rows are not a multiple of 256 falls back as llama.cpp's ``tensor_type_fallback`` does (Q4_K -> Q5_0,
  Q6_K -> Q8_0; F16 when not even a multiple of 32); norms and biases F32.  Experts: ``ffn_down_exps``
  is a ``ffn_down`` to llama.cpp (its category is any name containing ``ffn_down``; with experts the
  layer is parsed from the name, ``blk.N.``, and ``n`` is the layer count), so it is Q6_K on the same
  layers; ``ffn_gate_exps`` / ``ffn_up_exps`` Q4_K; the router ``ffn_gate_inp`` is never quantized
  (``tensor_allows_quantization``) and stays F32, as llama.cpp's converter writes it, in every mix.
  OLMoE-1B-7B: attn_v and ffn_down_exps Q6_K on layers 0, 1, 4, 7, 10, 13, 14, 15; Qwen3-30B-A3B: on
  0-5, 8, 11, ..., 41, 42-47 (24 of 48).  Not reproduced: the rules for 70B models, for exactly 8
  experts (Mixtral: attn_v and attn_k Q8_0, attn_output Q5_K; no shape here has 8 experts) and
  ``attn_qkv`` (no fused layouts here).
- ``mxfp4_moe``: llama-quantize's MXFP4_MOE: the 3-D expert tensors MXFP4, every other matrix (token
  embedding and output included) Q8_0.
- one ggml type's name (``SINGLE_TYPES``: ``Q4_0``, ``Q4_1``, ``Q5_0``, ``Q5_1``, ``Q8_0``, ``Q2_K``,
  ``Q3_K``, ``Q4_K``, ``Q5_K``, ``Q6_K``, ``IQ4_NL``, ``IQ4_XS``, ``MXFP4``: the block types the
  converter keeps as stored): every matrix (token embedding, attention, MLP or experts, output) in
  that type, norms, biases and routers F32; a matrix whose rows are not a multiple of the type's block falls back as
  llama.cpp's ``tensor_type_fallback`` does (Q2_K, Q3_K, IQ4_XS -> IQ4_NL; Q4_K -> Q5_0; Q5_K -> Q5_1;
  Q6_K -> Q8_0; F16 when the fallback does not divide the rows either).  These are test files, not
  llama.cpp's mixes (its Q4_0 or Q3_K_S files keep some tensors in other types).

The quantized blocks are not made by a quantizer: their packed quants and sub-block scales are random
bytes (the K-quants' sub-block minimums copy the scales, below), and only the super-block scales (fp16 ``d``; the fp16 minimum scale of the types that have one;
MXFP4's e8m0 exponent) are set, per block, from a small value (a nominal scale times a uniform factor
in [0.5, 1.5)) chosen so the dequantized weights have a standard deviation near 0.02, about that of
trained LLM matrices (scales near 1e-3 would give Q6_K weights of several units, whose activations
grow layer after layer).  The types with minimums are centred block by block, as a quantizer's output
for zero-mean weights is: Q4_1 / Q5_1's ``m`` is minus the mean code times ``d``; the K-quants' ``dmin``
is the mean code times ``d`` and each sub-block's minimum byte equals its scale byte, so a sub-block
dequantizes to ``d * s * (q - mean code)`` (independent random minimums would give every sub-block of
32 weights a random common offset, a structure trained matrices do not have, which makes random
models' activations much larger).  Q4_0, Q5_0 and IQ4_NL, whose codes are not symmetric about 0
(``q - 8`` is -8..7, the IQ4 table's mean is -5.9), get a ``d`` of random sign, as a quantizer's
takes the sign of the block's largest weight; without it every matrix would have a common offset.

Block layouts (ggml's ``block_*`` structs; ``d``, ``m``, ``dmin`` fp16):

- Q4_0: ``d``, 16 bytes of nibbles (``d * (q - 8)``); Q4_1: ``d``, ``m``, 16 bytes of nibbles
  (``d * q + m``); Q5_0: ``d``, 4 bytes ``qh``, 16 bytes of nibbles (``d * (q - 16)``); Q5_1: ``d``,
  ``m``, 4 bytes ``qh``, 16 bytes of nibbles (``d * q + m``); Q8_0: ``d``, 32 int8.
- Q2_K: 16 bytes of 4-bit scales (low nibbles) and mins, 64 bytes of 2-bit quants, ``d``, ``dmin`` at
  the end (``d * s * q - dmin * m``); Q3_K: 32 bytes ``hmask``, 64 bytes of 2-bit quants, 12 bytes of 6-bit
  scales, ``d`` at the end (``d * (s - 32) * (q - 4 * !hbit)``); Q4_K: ``d``, ``dmin``, 12 bytes of
  6-bit scales and mins (bytes 0-3 the scales 0-3, 4-7 the mins 0-3, each with 2 high bits of entry
  4-7; 8-11 the low 4 bits of scales 4-7 in the low nibble, of mins 4-7 in the high one), 128 bytes of
  nibbles (``d * s * q - dmin * m``); Q5_K: as Q4_K with 32 bytes ``qh`` before the
  nibbles; Q6_K: 128 bytes ``ql``, 64 bytes ``qh``, 16 int8 scales, then ``d`` at the end.
- IQ4_NL: ``d``, 16 bytes of nibbles indexing the non-linear table ``[-127 .. 113]`` (rms 67.4, so
  ``d`` is about 3e-4); IQ4_XS: ``d``, 2 bytes ``scales_h``, 4 bytes ``scales_l`` (6-bit sub-scales
  ``s - 32``), 128 bytes of nibbles indexing the same table.
- MXFP4: one e8m0 byte ``e`` then 16 bytes of nibbles indexing the doubled fp4 values ``[0, 1, 2, 3,
  4, 6, 8, 12]`` and their negatives, times ``2 ** (e - 128)`` (ggml's half of ``2 ** (e - 127)``):
  ``e`` is ``128 + round(log2(scale))``, 119 or 120 for the nominal scale.

Norm weights are 1 plus a little noise, biases small; routers (F32) normal of standard deviation 0.02,
like any float matrix here (router logits of about 0.9 on a unit-rms hidden state of 2048, so the
tokens spread over the experts).

The file is written one tensor at a time, each in chunks of ``chunk_bytes`` (32 MiB), so the writer
holds at most one chunk of weights, whatever the model size; the tensor infos go first (gguf's
``GGUFWriter.add_tensor_info``), then each tensor's bytes straight into the open file, aligned as the
writer laid them out.  The output is deterministic: every tensor draws from its own generator seeded
with ``(seed, tensor index)``; the vocabulary is fixed by the shape.  It is written to ``OUT.partial``
and renamed when complete.

The tokenizer is a synthetic gpt2-style byte-level BPE of exactly the shape's vocabulary size: the 256
byte tokens (GPT-2's byte-to-unicode order), then one token per merge (every merge joins a token made
before it and one letter into a new token: the likeliest letter strings under English letter
frequencies, with and without the leading byte-level space ``Ġ``, so the tokens are as long as a real
vocabulary's and English text splits into pieces of a few letters), then
the shape's special tokens (control, or user-defined where the real tokenizer has non-special added
tokens), then ``[PAD<i>]`` tokens (unused) up to the embedding's row count, as llama.cpp pads
Qwen2.5's vocabulary.  Metadata: ``general.*``, the ``<arch>.*`` hyper-parameters, ``tokenizer.ggml.*``
(model ``gpt2``, pre, tokens, token_type, merges, bos / eos / padding ids, add_bos_token) and
``tokenizer.chat_template`` (where the shape has one).
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

__all__ = [
    "MIXES",
    "SHAPES",
    "SINGLE_TYPES",
    "Shape",
    "TensorPlan",
    "tensor_plan",
    "use_more_bits",
    "vocabulary",
    "write_random_gguf",
]

# ggml types a single-type mix may name: the block types inference4py.gguf keeps as the file holds them
SINGLE_TYPES = (
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q8_0",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "IQ4_NL",
    "IQ4_XS",
    "MXFP4",
)
MIXES = ("q8_0", "q4_k_m", "mxfp4_moe", *SINGLE_TYPES)
QK_K = 256  # values per K-quant super-block
TARGET_STD = 0.02  # standard deviation of the dequantized random weights (about that of trained matrices)

# llama.cpp's token types
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5

_CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
_QWEN_SPECIALS: tuple[tuple[str, int], ...] = tuple(
    (text, _CONTROL)
    for text in (
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<|object_ref_start|>",
        "<|object_ref_end|>",
        "<|box_start|>",
        "<|box_end|>",
        "<|quad_start|>",
        "<|quad_end|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|vision_pad|>",
        "<|image_pad|>",
        "<|video_pad|>",
    )
) + tuple(
    (text, _USER_DEFINED)  # added tokens that Qwen2.5's tokenizer does not mark special
    for text in (
        "<tool_call>",
        "</tool_call>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
    )
)


def _llama3_specials(count: int) -> tuple[tuple[str, int], ...]:
    """Llama 3's special tokens in their order (ids 128000...): the named ones, reserved ones between."""
    named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>", 7: "<|end_header_id|>"}
    named[9] = "<|eot_id|>"
    out, reserved = [], 0
    for i in range(count):
        if i in named:
            out.append((named[i], _CONTROL))
        else:
            out.append((f"<|reserved_special_token_{reserved}|>", _CONTROL))
            reserved += 1
    return tuple(out)


@dataclass(frozen=True)
class Shape:
    """A decoder's sizes and its tokenizer's layout, as its llama.cpp GGUF file states them."""

    name: str
    arch: str  # general.architecture
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int  # rows of token_embd.weight (tokens, specials and pads)
    regular: int  # byte tokens + merged tokens; the specials follow them
    specials: tuple[tuple[str, int], ...]  # (text, token type) after the regular tokens
    context: int
    rope_base: float
    eps: float
    tied: bool  # no output.weight: the output projection is the token embedding
    qkv_bias: bool
    pre: str  # tokenizer.ggml.pre
    bos: str
    eos: str
    pad: str | None
    add_bos: bool
    chat_template: str  # "" for none (a base model)
    experts: int = 0  # mixture of experts: experts per layer (0: a dense MLP)
    experts_used: int = 0  # experts chosen per token
    expert_ff: int = 0  # rows of one expert's gate and up matrices
    expert_ff_key: bool = True  # <arch>.expert_feed_forward_length written (olmoe reads feed_forward_length)
    qk_norm: str = ""  # "heads": q/k RMS norms over all heads at once; "head": per head; "": none
    # multi-head latent attention (deepseek2; kv_lora > 0): head_dim is the query/key head (nope + rope)
    kv_lora: int = 0  # the cached latent's width
    rope_dim: int = 0  # the decoupled rotary part of each query/key head
    v_dim: int = 0  # each head's value width
    leading_dense: int = 0  # first layers with a dense MLP (intermediate), the rest experts
    shared_experts: int = 0  # ungated shared experts (expert_ff rows each) beside the routed ones
    gpt_oss: bool = False  # o/router/expert biases, attention sinks, post_attention_norm in place of ffn_norm
    sliding_window: int = 0  # <arch>.attention.sliding_window (0: none)
    yarn: tuple[float, int, float] | None = None  # YaRN: (factor, original context, yarn_log_multiplier or 0)


_QWEN25_1_5B = Shape(
    name="qwen2.5-1.5b",
    arch="qwen2",
    layers=28,
    hidden=1536,
    intermediate=8960,
    heads=12,
    kv_heads=2,
    head_dim=128,
    vocab=151936,
    regular=151643,
    specials=_QWEN_SPECIALS,
    context=32768,
    rope_base=1_000_000.0,
    eps=1e-6,
    tied=True,
    qkv_bias=True,
    pre="qwen2",
    bos="<|endoftext|>",
    eos="<|im_end|>",
    pad="<|endoftext|>",
    add_bos=False,
    chat_template=_CHATML,
)
_LLAMA3_8B = Shape(
    name="llama3-8b",
    arch="llama",
    layers=32,
    hidden=4096,
    intermediate=14336,
    heads=32,
    kv_heads=8,
    head_dim=128,
    vocab=128256,
    regular=128000,
    specials=_llama3_specials(256),
    context=8192,
    rope_base=500_000.0,
    eps=1e-5,
    tied=False,
    qkv_bias=False,
    pre="llama-bpe",
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    pad=None,
    add_bos=True,
    chat_template=_LLAMA3_TEMPLATE,
)
_OLMOE_1B_7B = Shape(
    name="olmoe-1b-7b",
    arch="olmoe",
    layers=16,
    hidden=2048,
    intermediate=1024,  # feed_forward_length: llama.cpp's olmoe reads the experts' rows from it
    heads=16,
    kv_heads=16,
    head_dim=128,
    vocab=50304,
    regular=50275,
    specials=(
        ("|||IP_ADDRESS|||", _USER_DEFINED),
        ("<|padding|>", _CONTROL),
        ("|||EMAIL_ADDRESS|||", _USER_DEFINED),
        ("|||PHONE_NUMBER|||", _USER_DEFINED),
        ("<|endoftext|>", _CONTROL),  # id 50279, OLMoE's eos
    ),
    context=4096,
    rope_base=10_000.0,
    eps=1e-5,
    tied=False,
    qkv_bias=False,
    pre="olmo",
    bos="<|endoftext|>",
    eos="<|endoftext|>",
    pad="<|padding|>",
    add_bos=False,
    chat_template="",
    experts=64,
    experts_used=8,
    expert_ff=1024,
    expert_ff_key=False,
    qk_norm="heads",
)
_QWEN3_30B_A3B = Shape(
    name="qwen3-30b-a3b",
    arch="qwen3moe",
    layers=48,
    hidden=2048,
    intermediate=6144,  # config.json's intermediate_size (no dense MLP uses it), as llama.cpp's file states it
    heads=32,
    kv_heads=4,
    head_dim=128,
    vocab=151936,
    regular=151643,
    specials=_QWEN_SPECIALS
    + tuple((text, _USER_DEFINED) for text in ("<tool_response>", "</tool_response>", "<think>", "</think>")),
    context=40960,
    rope_base=1_000_000.0,
    eps=1e-6,
    tied=False,
    qkv_bias=False,
    pre="qwen2",
    bos="<|endoftext|>",
    eos="<|im_end|>",
    pad="<|endoftext|>",
    add_bos=False,
    chat_template=_CHATML,
    experts=128,
    experts_used=8,
    expert_ff=768,
    qk_norm="head",
)
_DEEPSEEK_V2_LITE = Shape(
    name="deepseek-v2-lite",
    arch="deepseek2",
    layers=27,
    hidden=2048,
    intermediate=10944,  # the first layer's dense MLP
    heads=16,
    kv_heads=1,  # llama.cpp's converter writes MLA as one shared key/value head (the latent)
    head_dim=192,  # qk_nope_head_dim 128 + qk_rope_head_dim 64
    vocab=102400,
    regular=100000,
    specials=(
        ("<｜begin▁of▁sentence｜>", _CONTROL),
        ("<｜end▁of▁sentence｜>", _CONTROL),
    ),
    context=163840,
    rope_base=10_000.0,
    eps=1e-6,
    tied=False,
    qkv_bias=False,
    pre="deepseek-llm",
    bos="<｜begin▁of▁sentence｜>",
    eos="<｜end▁of▁sentence｜>",
    pad="<｜end▁of▁sentence｜>",
    add_bos=True,
    chat_template="",
    experts=64,
    experts_used=6,
    expert_ff=1408,
    kv_lora=512,
    rope_dim=64,
    v_dim=128,
    leading_dense=1,
    shared_experts=2,
    yarn=(40.0, 4096, 0.0707),  # mscale_all_dim 0.707
)
_HARMONY_TEMPLATE = (  # gpt-oss's harmony format, shortened (the real template also renders tools and reasoning)
    "{% for message in messages %}{{ '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant<|channel|>final<|message|>' }}{% endif %}"
)
_HARMONY_NAMED = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",
}
_HARMONY_SPECIALS = tuple((_HARMONY_NAMED.get(i, f"<|reserved_{i}|>"), _CONTROL) for i in range(199998, 200019))
_GPT_OSS_20B = Shape(
    name="gpt-oss-20b",
    arch="gpt-oss",
    layers=24,
    hidden=2880,
    intermediate=2880,  # feed_forward_length: config.json's intermediate_size, the experts' rows
    heads=64,
    kv_heads=8,
    head_dim=64,
    vocab=201088,
    regular=199998,
    specials=_HARMONY_SPECIALS,
    context=131072,
    rope_base=150_000.0,
    eps=1e-5,
    tied=False,
    qkv_bias=True,
    pre="gpt-4o",
    bos="<|startoftext|>",
    eos="<|return|>",
    pad="<|endoftext|>",
    add_bos=False,
    chat_template=_HARMONY_TEMPLATE,
    experts=32,
    experts_used=4,
    expert_ff=2880,
    gpt_oss=True,
    sliding_window=128,
    yarn=(32.0, 4096, 0.0),
)
# the tiny shapes: the same tokenizer layout and constants at test size
_TINY = {"layers": 2, "hidden": 256, "intermediate": 512, "heads": 4, "kv_heads": 2, "head_dim": 64, "vocab": 1024}

SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        _QWEN25_1_5B,
        _LLAMA3_8B,
        _OLMOE_1B_7B,
        _QWEN3_30B_A3B,
        _DEEPSEEK_V2_LITE,
        _GPT_OSS_20B,
        replace(_QWEN25_1_5B, name="tiny", regular=1000, specials=_QWEN_SPECIALS[:3], context=4096, **_TINY),
        replace(_LLAMA3_8B, name="tiny-llama", regular=1014, specials=_llama3_specials(10), context=4096, **_TINY),
        replace(
            _QWEN3_30B_A3B,
            name="tiny-moe",
            regular=1000,
            specials=_QWEN_SPECIALS[:3],
            context=4096,
            experts=4,
            experts_used=2,
            expert_ff=256,
            **_TINY,
        ),
        replace(
            _DEEPSEEK_V2_LITE,
            name="tiny-mla",
            regular=1000,
            context=4096,
            **{**_TINY, "kv_heads": 1, "head_dim": 96},
            experts=4,
            experts_used=2,
            expert_ff=256,
            kv_lora=128,
            rope_dim=32,
            v_dim=64,
        ),
        replace(
            _GPT_OSS_20B,
            name="tiny-gpt-oss",
            regular=1000,
            specials=tuple((_HARMONY_NAMED.get(199998 + i, f"<|reserved_{i}|>"), _CONTROL) for i in range(21)),
            context=4096,
            experts=4,
            experts_used=2,
            expert_ff=256,
            sliding_window=16,
            **{**_TINY, "intermediate": 256},
        ),
    )
}


# --------------------------------------------------------------------------- tensor types


def _gguf() -> Any:
    import gguf

    return gguf


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's rule for the layers whose attn_v / ffn_down get more bits in Q4_K_M / Q5_K_M."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


# llama.cpp's tensor_type_fallback for the types used here (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and
# MXFP4 have blocks of 32, which divide every row of these shapes; llama.cpp has no fallback for them)
_FALLBACK = {"Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL", "IQ4_XS": "IQ4_NL", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def _fallback(qtype: str, cols: int) -> str:
    """llama.cpp's tensor_type_fallback: a type whose block does not divide the row length gives way."""
    gguf = _gguf()
    if cols % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]][0] == 0:
        return qtype
    qtype = _FALLBACK.get(qtype, qtype)
    return qtype if cols % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]][0] == 0 else "F16"


def _matrix_type(shape: Shape, mix: str, name: str, cols: int, layer: int | None) -> str:
    if mix == "q8_0":
        return _fallback("Q8_0", cols)
    if mix in SINGLE_TYPES:
        return _fallback(mix, cols)
    if mix == "mxfp4_moe":  # llama-quantize: 3-D expert tensors MXFP4, every other matrix Q8_0
        return _fallback("MXFP4" if name.endswith("_exps.weight") else "Q8_0", cols)
    if mix != "q4_k_m":
        raise ValueError(f"unknown mix {mix!r}: use one of {', '.join(MIXES)}")
    if name == "output.weight" or (shape.tied and name == "token_embd.weight"):
        # llama.cpp: Q8_0 when the row is not a multiple of the default type's block, else Q6_K
        return "Q6_K" if cols % QK_K == 0 else "Q8_0"
    qtype = "Q4_K"
    if layer is not None and name.endswith((".attn_v.weight", ".ffn_down.weight", ".ffn_down_exps.weight")):
        qtype = "Q6_K" if use_more_bits(layer, shape.layers) else "Q4_K"
    return _fallback(qtype, cols)


@dataclass(frozen=True)
class TensorPlan:
    """One tensor of the file: GGUF name, numpy-order shape (``[rows, cols]`` for a matrix), ggml type."""

    name: str
    shape: tuple[int, ...]
    type: str

    def nbytes(self) -> int:
        gguf = _gguf()
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[self.type]]
        return int(np.prod(self.shape)) // block * size


def tensor_plan(shape: Shape, mix: str) -> list[TensorPlan]:
    """The tensors of ``shape`` in file order (llama.cpp's names) with the ggml type ``mix`` gives each."""
    q, kv, h = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.hidden
    plan: list[TensorPlan] = []

    def add(name: str, dims: tuple[int, ...], layer: int | None = None) -> None:
        # llama-quantize keeps the router (ffn_gate_inp) as the converter wrote it (F32), and every bias
        if len(dims) == 1 or name.endswith((".ffn_gate_inp.weight", ".bias")):
            kind = "F32"
        else:
            kind = _matrix_type(shape, mix, name, dims[-1], layer)
        plan.append(TensorPlan(name, dims, kind))

    add("token_embd.weight", (shape.vocab, h))
    for i in range(shape.layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", (h,))
        if shape.kv_lora:
            _latent_attention(shape, p, i, add)
            _latent_ffn(shape, p, i, add)
            continue
        for part, rows in (("q", q), ("k", kv), ("v", kv)):
            add(f"{p}attn_{part}.weight", (rows, h), i)
            if shape.qkv_bias:
                add(f"{p}attn_{part}.bias", (rows,))
        if shape.qk_norm:
            per_head = shape.qk_norm == "head"
            add(p + "attn_q_norm.weight", (shape.head_dim if per_head else q,))
            add(p + "attn_k_norm.weight", (shape.head_dim if per_head else kv,))
        add(p + "attn_output.weight", (h, q), i)
        if shape.gpt_oss:
            add(p + "attn_output.bias", (h,))
            add(p + "attn_sinks.weight", (shape.heads,))
        add(p + ("post_attention_norm.weight" if shape.gpt_oss else "ffn_norm.weight"), (h,))
        if shape.experts:
            e, ff = shape.experts, shape.expert_ff
            add(p + "ffn_gate_inp.weight", (e, h), i)
            add(p + "ffn_gate_exps.weight", (e, ff, h), i)
            add(p + "ffn_up_exps.weight", (e, ff, h), i)
            add(p + "ffn_down_exps.weight", (e, h, ff), i)
            if shape.gpt_oss:
                add(p + "ffn_gate_inp.bias", (e,))
                add(p + "ffn_gate_exps.bias", (e, ff))
                add(p + "ffn_up_exps.bias", (e, ff))
                add(p + "ffn_down_exps.bias", (e, h))
        else:
            add(p + "ffn_gate.weight", (shape.intermediate, h), i)
            add(p + "ffn_up.weight", (shape.intermediate, h), i)
            add(p + "ffn_down.weight", (h, shape.intermediate), i)
    add("output_norm.weight", (h,))
    if not shape.tied:
        add("output.weight", (shape.vocab, h))
    return plan


def _latent_attention(shape: Shape, p: str, i: int, add: Callable[..., None]) -> None:
    """deepseek2's attention tensors as llama.cpp's converter writes them (no q LoRA: V2-Lite)."""
    nope, h = shape.head_dim - shape.rope_dim, shape.hidden
    add(p + "attn_q.weight", (shape.heads * shape.head_dim, h), i)
    add(p + "attn_kv_a_mqa.weight", (shape.kv_lora + shape.rope_dim, h), i)
    add(p + "attn_kv_a_norm.weight", (shape.kv_lora,))
    add(p + "attn_k_b.weight", (shape.heads, shape.kv_lora, nope), i)
    add(p + "attn_v_b.weight", (shape.heads, shape.v_dim, shape.kv_lora), i)
    add(p + "attn_output.weight", (h, shape.heads * shape.v_dim), i)
    add(p + "ffn_norm.weight", (h,))


def _latent_ffn(shape: Shape, p: str, i: int, add: Callable[..., None]) -> None:
    """A dense MLP in the leading layers, then routed experts beside ungated shared ones."""
    h = shape.hidden
    if i < shape.leading_dense:
        add(p + "ffn_gate.weight", (shape.intermediate, h), i)
        add(p + "ffn_up.weight", (shape.intermediate, h), i)
        add(p + "ffn_down.weight", (h, shape.intermediate), i)
        return
    e, ff, shared = shape.experts, shape.expert_ff, shape.shared_experts * shape.expert_ff
    add(p + "ffn_gate_inp.weight", (e, h), i)
    add(p + "ffn_gate_exps.weight", (e, ff, h), i)
    add(p + "ffn_up_exps.weight", (e, ff, h), i)
    add(p + "ffn_down_exps.weight", (e, h, ff), i)
    add(p + "ffn_gate_shexp.weight", (shared, h), i)
    add(p + "ffn_up_shexp.weight", (shared, h), i)
    add(p + "ffn_down_shexp.weight", (h, shared), i)


# --------------------------------------------------------------------------- random blocks


@dataclass(frozen=True)
class _BlockLayout:
    """Where a ggml block's super-block scales sit, and the scale giving weights of about TARGET_STD."""

    values: int  # weights per block
    size: int  # bytes per block
    d: int  # byte offset of the fp16 scale d (MXFP4: of its e8m0 exponent)
    nominal: float  # d (MXFP4: the half-scale 2 ** (e - 128)) for a standard deviation of about TARGET_STD
    minimum: int | None = None  # byte offset of the fp16 minimum scale (m or dmin), if the type has one
    ratio: float = 0.0  # minimum scale / d: centres the weights (negative where m is added, not subtracted)
    signed: bool = False  # d of either sign: centres codes that are not symmetric about 0


# The nominal d is TARGET_STD over the rms of the dequantized weights at d = 1 with random codes and
# sub-scales (uniform q4 in 0..15: mean 7.5, variance 21.25; q5: mean 15.5, variance 85.25; q2 in 0..3:
# mean 1.5, variance 1.25; 6-bit s in 0..63: mean square 1333.5; 4-bit s: mean square 77.5; a random int8:
# rms 73.9; s6 - 32: rms 18.5; the IQ4 table: rms 67.4; the doubled fp4 values: rms 5.85):
# Q4_0 d * (q4 - 8) (rms 4.64); Q4_1 d * q4 + m with m = -7.5 d (4.61); Q5_0 d * (q5 - 16) (9.2);
# Q5_1 d * q5 + m with m = -15.5 d (9.23); Q8_0 d * q8 (73.9);
# Q2_K d * s4 * q2 - dmin * m4 with dmin = 1.5 d and m4 = s4, so d * s4 * (q2 - 1.5) (rms 9.84);
# Q3_K d * (s6 - 32) * (q3 - 4) (18.5 * 2.35); Q4_K d * s6 * (q4 - 7.5) likewise (dmin = 7.5 d, m6 = s6:
# 168); Q5_K d * s6 * (q5 - 15.5) (337); Q6_K d * s8 * (q6 - 32) (73.9 * 18.5); IQ4_NL d * table[q4]
# (67.4); IQ4_XS d * (s6 - 32) * table[q4] (18.5 * 67.4); MXFP4 2 ** (e - 128) * fp4x2[q4] (5.85).
_LAYOUT: dict[str, _BlockLayout] = {
    "Q4_0": _BlockLayout(32, 18, 0, TARGET_STD / 4.64, signed=True),
    "Q4_1": _BlockLayout(32, 20, 0, TARGET_STD / 4.61, minimum=2, ratio=-7.5),
    "Q5_0": _BlockLayout(32, 22, 0, TARGET_STD / 9.2, signed=True),
    "Q5_1": _BlockLayout(32, 24, 0, TARGET_STD / 9.23, minimum=2, ratio=-15.5),
    "Q8_0": _BlockLayout(32, 34, 0, TARGET_STD / 73.9),
    "Q2_K": _BlockLayout(QK_K, 84, 80, TARGET_STD / 9.84, minimum=82, ratio=1.5),
    "Q3_K": _BlockLayout(QK_K, 110, 108, TARGET_STD / (18.5 * 2.35)),
    "Q4_K": _BlockLayout(QK_K, 144, 0, TARGET_STD / 168.0, minimum=2, ratio=7.5),
    "Q5_K": _BlockLayout(QK_K, 176, 0, TARGET_STD / 337.0, minimum=2, ratio=15.5),
    "Q6_K": _BlockLayout(QK_K, 210, 208, TARGET_STD / (73.9 * 18.5)),
    "IQ4_NL": _BlockLayout(32, 18, 0, TARGET_STD / 67.4, signed=True),
    "IQ4_XS": _BlockLayout(QK_K, 136, 0, TARGET_STD / (18.5 * 67.4)),
    "MXFP4": _BlockLayout(32, 17, 0, TARGET_STD / 5.85),
}


def _random_bytes(rng: np.random.Generator, count: int) -> np.ndarray:
    words = rng.bit_generator.random_raw((count + 7) // 8)
    return words.astype("<u8", copy=False).view(np.uint8)[:count]


def _blocks(rng: np.random.Generator, qtype: str, n_blocks: int) -> np.ndarray:
    """``n_blocks`` random blocks of ``qtype`` as ``[n_blocks, block bytes]`` uint8, super-block scales set."""
    layout = _LAYOUT[qtype]
    blocks = _random_bytes(rng, n_blocks * layout.size).reshape(n_blocks, layout.size)
    d = layout.nominal * rng.uniform(0.5, 1.5, n_blocks)
    if qtype == "MXFP4":  # e8m0: the weights are 2 ** (e - 128) times the doubled fp4 values
        blocks[:, layout.d] = 128 + np.rint(np.log2(d)).astype(np.int64)
        return blocks
    if layout.signed:
        d = d * rng.choice(np.array([-1.0, 1.0]), n_blocks)
    blocks[:, layout.d : layout.d + 2] = d.astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    if layout.minimum is not None:
        m = (d * layout.ratio).astype("<f2")
        blocks[:, layout.minimum : layout.minimum + 2] = m.view(np.uint8).reshape(n_blocks, 2)
    # K-quants: each sub-block's minimum byte = its scale byte, which centres the sub-block
    if qtype in ("Q4_K", "Q5_K"):
        packed = blocks[:, 4:16]  # a view: written in place
        packed[:, 4:8] = packed[:, 0:4]  # mins 0-3 and the high bits of mins 4-7 = the scales'
        packed[:, 8:12] = (packed[:, 8:12] & 0x0F) | (packed[:, 8:12] << 4)  # low bits of mins 4-7 = the scales'
    elif qtype == "Q2_K":
        blocks[:, 0:16] = (blocks[:, 0:16] & 0x0F) | (blocks[:, 0:16] << 4)  # high nibble (min) = low (scale)
    return blocks


def _chunks(t: TensorPlan, rng: np.random.Generator, chunk_bytes: int) -> Iterator[np.ndarray]:
    """The tensor's bytes, a few whole rows at a time (about ``chunk_bytes`` each)."""
    rows = int(np.prod(t.shape[:-1]))  # a 3-D expert tensor: experts x rows of one expert
    cols = t.shape[-1]
    if t.type in ("F32", "F16"):
        dtype = np.dtype("<f4" if t.type == "F32" else "<f2")
        if len(t.shape) == 1:
            base = 1.0 if t.name.endswith("norm.weight") else 0.0
            scale = 0.01 if t.name.endswith("norm.weight") else TARGET_STD
            yield (base + scale * rng.standard_normal(cols)).astype(dtype).view(np.uint8)
            return
        step = max(1, chunk_bytes // (cols * dtype.itemsize))
        for start in range(0, rows, step):
            n = min(step, rows - start)
            yield (TARGET_STD * rng.standard_normal((n, cols))).astype(dtype).view(np.uint8).reshape(-1)
        return
    layout = _LAYOUT[t.type]
    per_row = cols // layout.values
    step = max(1, chunk_bytes // (per_row * layout.size))
    for start in range(0, rows, step):
        n = min(step, rows - start)
        yield _blocks(rng, t.type, n * per_row).reshape(-1)


# --------------------------------------------------------------------------- vocabulary


def _byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet, in its vocabulary order (printable bytes first)."""
    from inference4py.speech.files.vocabulary import byte_to_char

    chars = byte_to_char()
    printable = [b for b in range(256) if chars[b] == chr(b)]
    return [chars[b] for b in printable] + [chars[b] for b in range(256) if b not in printable]


# English letter frequencies (percent): the vocabulary's pieces are the likeliest letter strings under them
# fmt: off
_LETTER_FREQ = {
    "e": 12.7, "t": 9.1, "a": 8.2, "o": 7.5, "i": 7.0, "n": 6.7, "s": 6.3, "h": 6.1, "r": 6.0, "d": 4.3,
    "l": 4.0, "c": 2.8, "u": 2.8, "m": 2.4, "w": 2.4, "f": 2.2, "g": 2.0, "y": 2.0, "p": 1.9, "b": 1.5,
    "v": 0.98, "k": 0.77, "j": 0.15, "x": 0.15, "q": 0.095, "z": 0.074,
}
# fmt: on
_SPACE = "Ġ"  # the byte-level form of " "
_WORD_START = 0.5  # weight of a piece that starts a word (after the space) against one inside a word
_CAPITAL = 0.1  # weight of a capital letter against its small letter, first letter of a piece only


def _pieces(count: int) -> Iterator[tuple[str, str]]:
    """The ``count`` likeliest letter strings of two or more symbols, each as ``(all but last, last)``.

    A string's weight is the product of its letters' frequencies (times ``_WORD_START`` after a leading
    ``Ġ``, times ``_CAPITAL`` for a capital first letter); only the first letter may be a capital.
    Best-first over that tree: a string's prefix always weighs more, so it comes out first and every
    merge joins two existing tokens.  Each string enters the heap once its elder sibling or its parent
    comes out, so the heap stays as small as the output.
    """
    total = sum(_LETTER_FREQ.values())
    lower = sorted(((f / total, c) for c, f in _LETTER_FREQ.items()), key=lambda x: (-x[0], x[1]))
    first = sorted(lower + [(w * _CAPITAL, c.upper()) for w, c in lower], key=lambda x: (-x[0], x[1]))
    roots = sorted([(_WORD_START, _SPACE)] + [(w * (1 - _WORD_START), c) for w, c in first], key=lambda x: -x[0])

    def children(text: str) -> list[tuple[float, str]]:
        return first if text == _SPACE else lower

    # heap entries: (-weight, text, index of the text's last symbol among its siblings, parent's weight)
    heap: list[tuple[float, str, int, float]] = [(-roots[0][0], roots[0][1], 0, 1.0)]
    emitted = 0
    while emitted < count:
        negative, text, index, parent = heapq.heappop(heap)
        weight = -negative
        siblings = roots if len(text) == 1 else children(text[:-1])
        if index + 1 < len(siblings):
            w, c = siblings[index + 1]
            heapq.heappush(heap, (-parent * w, text[:-1] + c, index + 1, parent))
        w, c = children(text)[0]
        heapq.heappush(heap, (-weight * w, text + c, 0, weight))
        if len(text) > 1:
            emitted += 1
            yield text[:-1], text[-1]


def vocabulary(shape: Shape) -> tuple[list[str], list[int], list[str]]:
    """``(tokens, token types, merges)``: a byte-level BPE vocabulary of exactly ``shape.vocab`` tokens.

    Tokens 0-255 are the bytes; each merge ``"a b"`` then adds the token ``a + b``, where ``b`` is one
    letter and ``a`` a token made before (see :func:`_pieces`): the likeliest letter strings under
    English letter frequencies, with and without the leading byte-level space, so tokens have the
    lengths of a real vocabulary's (mostly 3 to 6 characters) and English text splits into pieces of a
    few letters.  The shape's special tokens follow, then ``[PAD<i>]`` up to ``shape.vocab``.
    """
    tokens = _byte_tokens()
    types = [_NORMAL] * len(tokens)
    merges: list[str] = []
    for left, right in _pieces(shape.regular - len(tokens)):
        tokens.append(left + right)
        types.append(_NORMAL)
        merges.append(f"{left} {right}")
    for text, kind in shape.specials:
        tokens.append(text)
        types.append(kind)
    while len(tokens) < shape.vocab:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(_UNUSED)
    if len(tokens) != shape.vocab or len(set(tokens)) != len(tokens):
        raise ValueError(f"{shape.name}: {len(tokens)} tokens ({len(set(tokens))} distinct) for {shape.vocab}")
    return tokens, types, merges


# --------------------------------------------------------------------------- writing


# general.file_type: llama.cpp's name for the file type whose default tensor type a mix is (K types: the _S file)
_FILE_TYPES = {
    "Q3_K": "MOSTLY_Q3_K_S",
    "Q4_K": "MOSTLY_Q4_K_S",
    "Q5_K": "MOSTLY_Q5_K_S",
    "MXFP4": "MOSTLY_MXFP4_MOE",
    "MXFP4_MOE": "MOSTLY_MXFP4_MOE",
}


def _metadata(writer: Any, shape: Shape, mix: str, seed: int) -> None:
    gguf = _gguf()
    writer.add_type("model")
    writer.add_name(f"random {shape.name} ({mix})")
    writer.add_description(
        f"Random weights (seed {seed}) with the shapes of {shape.name}, written by tools/random_gguf.py "
        "for measuring conversion and speed; the text it generates is meaningless."
    )
    writer.add_file_type(gguf.LlamaFileType[_FILE_TYPES.get(mix.upper(), f"MOSTLY_{mix.upper()}")])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.intermediate)
    if shape.experts:
        writer.add_expert_count(shape.experts)
        writer.add_expert_used_count(shape.experts_used)
        if shape.expert_ff_key:
            writer.add_expert_feed_forward_length(shape.expert_ff)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(shape.eps)
    if shape.kv_lora:
        _latent_metadata(writer, shape)
    else:
        writer.add_rope_dimension_count(shape.head_dim)
    if not shape.kv_lora and shape.head_dim != shape.hidden // shape.heads:
        writer.add_key_length(shape.head_dim)
        writer.add_value_length(shape.head_dim)
    writer.add_vocab_size(shape.vocab)
    if shape.sliding_window:
        writer.add_sliding_window(shape.sliding_window)
    if shape.yarn is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(shape.yarn[0])
        writer.add_rope_scaling_orig_ctx_len(shape.yarn[1])
        writer.add_rope_scaling_yarn_beta_fast(32.0)
        writer.add_rope_scaling_yarn_beta_slow(1.0)
        if shape.yarn[2]:
            writer.add_rope_scaling_yarn_log_mul(shape.yarn[2])

    tokens, types, merges = vocabulary(shape)
    ids = {t: i for i, t in enumerate(tokens)}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(shape.pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(ids[shape.bos])
    writer.add_eos_token_id(ids[shape.eos])
    if shape.pad is not None:
        writer.add_pad_token_id(ids[shape.pad])
    writer.add_add_bos_token(shape.add_bos)
    if shape.chat_template:
        writer.add_chat_template(shape.chat_template)


def _latent_metadata(writer: Any, shape: Shape) -> None:
    """deepseek2's keys: the latent's widths, the dense first layers, the shared experts."""
    writer.add_rope_dimension_count(shape.rope_dim)
    writer.add_kv_lora_rank(shape.kv_lora)
    writer.add_key_length(shape.kv_lora + shape.rope_dim)  # the cached key: latent + rope key (MQA form)
    writer.add_value_length(shape.kv_lora)
    writer.add_key_length_mla(shape.head_dim)
    writer.add_value_length_mla(shape.v_dim)
    writer.add_leading_dense_block_count(shape.leading_dense)
    writer.add_expert_shared_count(shape.shared_experts)
    writer.add_expert_weights_scale(1.0)


def _pad(out: BinaryIO, alignment: int) -> None:
    gap = -out.tell() % alignment
    if gap:
        out.write(bytes(gap))


def write_random_gguf(
    path: str | os.PathLike[str],
    shape: str | Shape,
    mix: str,
    *,
    seed: int = 0,
    chunk_bytes: int = 32 << 20,
    progress: bool = False,
) -> dict[str, Any]:
    """Write a random-weight GGUF file of ``shape`` (a name of ``SHAPES`` or a Shape) quantized as ``mix``.

    Args:
        path: The ``.gguf`` file to create (written as ``<path>.partial``, then renamed).
        shape: A name of ``SHAPES`` (``"qwen2.5-1.5b"``, ``"llama3-8b"``, ``"olmoe-1b-7b"``,
            ``"qwen3-30b-a3b"``, ``"gpt-oss-20b"``, ``"tiny"``, ``"tiny-llama"``, ``"tiny-moe"``,
            ``"tiny-gpt-oss"``) or a :class:`Shape`.
        mix: ``"q8_0"``, ``"q4_k_m"``, ``"mxfp4_moe"`` or one ggml type of ``SINGLE_TYPES`` such as ``"Q2_K"`` (see the
            module docstring for the rules).
        seed: Seeds the weights; the same seed writes the same bytes.
        chunk_bytes: At most about this many bytes of weights are held at once.
        progress: Print one line per layer to stderr.

    Returns:
        ``{"path", "bytes", "tensors", "types": {type: count}, "seconds"}``.
    """
    gguf = _gguf()
    if isinstance(shape, str):
        if shape not in SHAPES:
            raise ValueError(f"unknown shape {shape!r}: use one of {', '.join(SHAPES)}")
        shape = SHAPES[shape]
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r}: use one of {', '.join(MIXES)}")
    started = time.perf_counter()
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    plan = tensor_plan(shape, mix)

    writer = gguf.GGUFWriter(str(partial), shape.arch)
    try:
        _metadata(writer, shape, mix, seed)
        for t in plan:
            qtype = gguf.GGMLQuantizationType[t.type]
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes(), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        if writer.fout is None or len(writer.fout) != 1:
            raise RuntimeError("the gguf writer did not open exactly one output file")
        out: BinaryIO = writer.fout[0]
        alignment = int(writer.data_alignment)
        for index, t in enumerate(plan):
            _pad(out, alignment)  # the data section and every tensor start aligned, as the tensor infos say
            rng = np.random.Generator(np.random.PCG64([seed, index]))
            written = 0
            for chunk in _chunks(t, rng, chunk_bytes):
                out.write(memoryview(np.ascontiguousarray(chunk)))
                written += chunk.nbytes
            if written != t.nbytes():
                raise RuntimeError(f"{t.name}: wrote {written} bytes, its tensor info says {t.nbytes()}")
            if progress and t.name.endswith(("ffn_down.weight", "ffn_down_exps.weight")):
                print(f"  {t.name} ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
        _pad(out, alignment)
        writer.close()
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, target)
    types: dict[str, int] = {}
    for t in plan:
        types[t.type] = types.get(t.type, 0) + 1
    return {
        "path": str(target),
        "bytes": target.stat().st_size,
        "tensors": len(plan),
        "types": types,
        "seconds": round(time.perf_counter() - started, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a random-weight GGUF file with a real model's shapes (for conversion and speed measurements)."
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), help="the model whose shapes the file has")
    parser.add_argument(
        "--mix",
        choices=MIXES,
        default="q4_k_m",
        help="tensor types: q8_0 or q4_k_m as llama.cpp's, or one ggml type for every matrix (default q4_k_m)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--list", action="store_true", help="list the shapes and the mixes' tensor types, then exit")
    parser.add_argument("out", nargs="?", help="the .gguf file to write")
    args = parser.parse_args(argv)
    if args.list:
        for shape in SHAPES.values():
            for mix in MIXES:
                plan = tensor_plan(shape, mix)
                counts: dict[str, int] = {}
                for t in plan:
                    counts[t.type] = counts.get(t.type, 0) + 1
                size = sum(t.nbytes() for t in plan) / 2**20
                print(f"{shape.name:14s} {mix:7s} {size:10.1f} MiB of tensors  {counts}")
        return 0
    if not args.shape or not args.out:
        parser.error("--shape and OUT are required (or --list)")
    result = write_random_gguf(args.out, args.shape, args.mix, seed=args.seed, progress=not args.quiet)
    print(
        f"{result['path']}: {result['bytes'] / 2**20:.1f} MiB, {result['tensors']} tensors {result['types']}, "
        f"{result['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
