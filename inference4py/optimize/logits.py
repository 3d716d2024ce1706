"""Logits of the positions asked for only: the fused graph's ``num_logits_to_keep`` input.

A prefill of n tokens needs the next-token logits of its last position, but an export computes
the language-model head for all n: ``[n, hidden] @ [hidden, vocab]``, about a tenth of a chat
prompt's prefill for SmolLM2 (a 49,152-token vocabulary) and a fifth of a 1,000-token one.  The
rewrite slices the hidden states before the head, as transformers' ``logits_to_keep`` does:
``k > 0`` keeps the last k positions, ``0`` keeps them all (prompt log-probabilities and
speculative verification need every position).  The engine feeds the input when a graph has it.

A 4-bit head (``MatMulNBits``) keeps at least two positions: onnxruntime computes a one-row
``MatMulNBits`` with another kernel than a several-row one, so slicing a prompt down to one row
would change its last logits; two rows take the several-row kernel, whose rows do not depend on
the others, and the engine reads the last one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["KEEP_INPUT", "slice_logits"]

KEEP_INPUT = "num_logits_to_keep"
_PREFIX = "/inference4py/logits_to_keep"


def slice_logits(model: Any) -> bool:
    """Add ``num_logits_to_keep`` to ``model`` (in place) in front of its language-model head.

    Returns False, leaving the graph as it is, when the graph takes such an input already or its
    ``logits`` output is not made by a ``MatMul`` of ``[batch, seq, hidden]`` states.
    """
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    if any(i.name in (KEEP_INPUT, "logits_to_keep") for i in graph.input):
        return False
    output = next((o for o in graph.output if o.name == "logits"), None)
    index = next((i for i, n in enumerate(graph.node) if "logits" in n.output), None)
    if output is None or index is None or graph.node[index].op_type not in ("MatMul", "MatMulNBits"):
        return False
    head = graph.node[index]
    dims = output.type.tensor_type.shape.dim
    if len(dims) != 3:
        return False
    hidden = head.input[0]
    name = {
        k: f"{_PREFIX}/{k}"
        for k in ("zero", "end", "axis", "shape", "is_all", "neg", "start", "start_1d", "hidden", "rows", "kept")
    }
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(0, dtype=np.int64), name["zero"]),
            numpy_helper.from_array(np.array([np.iinfo(np.int64).max], dtype=np.int64), name["end"]),
            numpy_helper.from_array(np.array([1], dtype=np.int64), name["axis"]),  # the sequence axis
            numpy_helper.from_array(np.array([1], dtype=np.int64), name["shape"]),  # a scalar as a 1-D start
        ]
    )
    kept = KEEP_INPUT
    nodes = [helper.make_node("Equal", [KEEP_INPUT, name["zero"]], [name["is_all"]], name=f"{_PREFIX}/Equal")]
    if head.op_type == "MatMulNBits":  # never a one-row product: see the module's docstring
        graph.initializer.append(numpy_helper.from_array(np.array(2, dtype=np.int64), name["rows"]))
        nodes.append(helper.make_node("Max", [KEEP_INPUT, name["rows"]], [name["kept"]], name=f"{_PREFIX}/Max"))
        kept = name["kept"]
    nodes += [
        helper.make_node("Neg", [kept], [name["neg"]], name=f"{_PREFIX}/Neg"),
        helper.make_node(
            "Where", [name["is_all"], name["zero"], name["neg"]], [name["start"]], name=f"{_PREFIX}/Where"
        ),
        helper.make_node("Reshape", [name["start"], name["shape"]], [name["start_1d"]], name=f"{_PREFIX}/Reshape"),
        helper.make_node(
            "Slice", [hidden, name["start_1d"], name["end"], name["axis"]], [name["hidden"]], name=f"{_PREFIX}/Slice"
        ),
    ]
    head.input[0] = name["hidden"]
    for offset, node in enumerate(nodes):
        graph.node.insert(index + offset, node)
    graph.input.append(helper.make_tensor_value_info(KEEP_INPUT, TensorProto.INT64, []))
    dims[1].Clear()
    dims[1].dim_param = "logits_length"
    return True
