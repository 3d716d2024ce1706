"""Attention fusion for exported decoder graphs: ``inference4py optimize FOLDER OUT``.

optimum (and ``torch.onnx``) export a decoder's attention as dozens of small
operators per layer: shape arithmetic, the rotary embedding, ``repeat_kv``, the
causal mask, ``Concat`` of the past cache, ``MatMul``/``Softmax``/``MatMul``.  On a
CPU those small kernels cost as much as the layer's weights.  This package
rewrites each layer's attention into one onnxruntime ``GroupQueryAttention``
node, the operator onnxruntime-genai's builder emits, so the engine runs the graph
with one pre-allocated KV buffer shared by past and present.

The rewrite is found from the graph, not from an architecture name.  For each
cache entry (``past_key_values.N.key`` -> ``present.N.key``) it follows the
dataflow: the ``Concat`` that appends the new keys, the ``MatMul``/``Softmax``/
``MatMul`` that read the cache, the ``Transpose``/``Reshape`` that hands the
result to the output projection.  Two levels:

* ``rotary``: when the keys and queries are rotated by the usual
  ``x * cos + rotate_half(x) * sin`` and their projections are plain ``MatMul``
  (+ bias), q/k/v become one packed ``MatMul`` and the rotation moves into the
  operator (``do_rotary``, cos/sin tables computed by the model's own rotary
  subgraph for every position).  This is the graph onnxruntime-genai builds.
* ``attention``: otherwise the rotated queries/keys are handed to the operator as
  they are (``do_rotary=0``).

Every rewrite is checked before it is written: the fused and the original graph
run the same random prompt and decode steps, and their logits must agree to
float32 precision; a rewrite that does not agree falls back to the next level,
and a graph with nothing to fuse is refused with the reason.  Models whose
attention is not plain causal softmax attention (sliding windows, logit soft
capping, ALiBi) are left alone.

The fused graph keeps ``input_ids``, ``attention_mask``, the cache inputs and
outputs, and the logits; ``GroupQueryAttention`` reads each row's length from
the attention mask and expects right-padded rows, which is what inference4py's
engine feeds it (``position_ids`` is dropped when the operator rotates).

One idea per module:

- ``folder``: model folders (:func:`optimize_folder`) and the cached fused copy (:func:`fused_model_folder`);
- ``fuse``: one in-memory graph (:func:`fuse_attention`): the levels in order, each checked, the report;
- ``refusals``: what config.json rules out (soft-capping, ALiBi, sliding windows);
- ``match``: the attention layers and the rotary embedding found in the graph;
- ``rewrite``: the fused graph built from them;
- ``check``: the original and the fused graph run and their logits compared;
- ``onnx_io``: the onnx package imported lazily, graphs in and out of memory.
"""

from __future__ import annotations

from .folder import auto_fused_folder as auto_fused_folder
from .folder import fused_model_folder as fused_model_folder
from .folder import optimize_folder as optimize_folder
from .folder import sliced_genai_folder as sliced_genai_folder
from .fuse import FusionReport as FusionReport
from .fuse import fuse_attention as fuse_attention

__all__ = [
    "FusionReport",
    "auto_fused_folder",
    "fuse_attention",
    "fused_model_folder",
    "optimize_folder",
    "sliced_genai_folder",
]
