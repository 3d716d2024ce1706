"""Decoders that output their cross-attention weights, for word timestamps.

Word timestamps need, at every decoding step, the cross-attention probabilities of the model's
alignment heads.  A decoder that already outputs ``cross_attentions.{i}`` (``[batch, heads, tgt,
src]``, the onnx-community ``*_timestamped`` exports) is used as it is.  A standard optimum export
does not: :func:`expose_cross_attentions` rewrites its graph once, making the Softmax of each
cross-attention block a graph output, and :func:`attention_decoder_files` keeps the rewritten
graphs in the inference4py cache (``whisper-attention/``), keyed by the original file's path,
size and modification time, as the fused folders are.

A cross-attention Softmax is told apart from a self-attention one by where its keys come from:
the encoder's output (``encoder_hidden_states`` projected by a MatMul) or the cross cache
(``past_key_values.{i}.encoder.key``), never the decoder's own states.  The merged decoder
(an ``If`` over ``use_cache_branch``) is rewritten in both branches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from inference4py.errors import UnsupportedModelError

_log = logging.getLogger("inference4py.whisper")

#: Bumped whenever the rewrite changes, so cached graphs of older rewrites are not reused.
ATTENTION_REWRITE_VERSION = 1
CROSS_ATTENTION = "cross_attentions.{}"
_CROSS_PAST = re.compile(r"past_key_values\.\d+\.encoder\.key|past_key_cross_\d+")
_PASS_THROUGH = {"Transpose", "Reshape", "Mul", "Div", "Cast", "Identity", "Unsqueeze", "Squeeze", "Concat", "Add"}


def cross_attention_outputs(names: Iterable[str]) -> list[str]:
    """The ``cross_attentions.{i}`` outputs among ``names``, in layer order."""
    found = [n for n in names if re.fullmatch(r"cross_attentions\.\d+", n)]
    return sorted(found, key=lambda n: int(n.rsplit(".", 1)[1]))


def _producers(graph: Any) -> dict[str, Any]:
    return {out: node for node in graph.node for out in node.output}


def _is_cross_softmax(node: Any, producers: dict[str, Any]) -> bool:
    """Whether a Softmax's keys come from the encoder side (see the module docstring)."""
    scores = producers.get(node.input[0])
    for _ in range(4):  # Softmax <- [Add mask] <- [Mul scale] <- MatMul(q, k^T)
        if scores is None or scores.op_type == "MatMul":
            break
        scores = producers.get(scores.input[0])
    if scores is None or scores.op_type != "MatMul" or len(scores.input) < 2:
        return False
    todo, seen = [scores.input[1]], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name == "encoder_hidden_states" or _CROSS_PAST.fullmatch(name):
            return True
        producer = producers.get(name)
        if producer is None:
            continue
        if producer.op_type in ("MatMul", "Gemm"):  # the key projection: look at what it projects, no further
            if "encoder_hidden_states" in producer.input:
                return True
            continue
        if producer.op_type in _PASS_THROUGH:
            todo.extend(producer.input)
    return False


def _cross_softmaxes(graph: Any) -> list[str]:
    producers = _producers(graph)
    return [n.output[0] for n in graph.node if n.op_type == "Softmax" and _is_cross_softmax(n, producers)]


def expose_cross_attentions(model: Any, layers: int | None = None) -> Any:
    """Add ``cross_attentions.{i}`` outputs (the cross-attention Softmax of each layer) to a decoder graph.

    Args:
        model: an ``onnx.ModelProto`` of a Whisper decoder (plain, with past, or merged with an If).
        layers: the decoder's layer count, to check the rewrite found one Softmax per layer.

    Returns:
        The same model, changed in place.

    Raises:
        UnsupportedModelError: no cross-attention Softmax (a fused attention operator hides them), or
            not one per layer.
    """
    import onnx
    from onnx import TensorProto, helper

    graph = model.graph
    if cross_attention_outputs(o.name for o in graph.output):
        return model
    branch_nodes = [n for n in graph.node if n.op_type == "If"]
    if branch_nodes:  # optimum's merged decoder: the whole decoder is one If over use_cache_branch
        if_node = branch_nodes[0]
        subgraphs = [a.g for a in if_node.attribute if a.type == onnx.AttributeProto.GRAPH]
        found = [_cross_softmaxes(g) for g in subgraphs]
        counts = {len(f) for f in found}
        if len(counts) != 1:
            raise UnsupportedModelError(_not_found(layers, sorted(counts)))
        count = counts.pop()
        _check(count, layers)
        for sub, names in zip(subgraphs, found):
            for i, name in enumerate(names):
                out = f"{sub.name or 'branch'}/{CROSS_ATTENTION.format(i)}"
                sub.node.append(helper.make_node("Identity", [name], [out], name=f"{out}/Identity"))
                sub.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
        for i in range(count):
            if_node.output.append(CROSS_ATTENTION.format(i))
            graph.output.append(helper.make_tensor_value_info(CROSS_ATTENTION.format(i), TensorProto.FLOAT, None))
        return model
    names = _cross_softmaxes(graph)
    _check(len(names), layers)
    for i, name in enumerate(names):
        out = CROSS_ATTENTION.format(i)
        graph.node.append(helper.make_node("Identity", [name], [out], name=f"{out}/Identity"))
        graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
    return model


def _check(count: int, layers: int | None) -> None:
    if count == 0 or (layers is not None and count != layers):
        raise UnsupportedModelError(_not_found(layers, [count]))


def _not_found(layers: int | None, counts: list[int]) -> str:
    return (
        f"Word timestamps need the decoder's cross-attention weights, but the decoder graph shows "
        f"{' / '.join(map(str, counts))} cross-attention Softmax node(s)"
        f"{'' if layers is None else f' for {layers} layers'} (a fused attention operator hides them). Use an "
        "export with cross_attentions outputs (onnx-community's *_timestamped repos) or an unfused optimum export, "
        "or transcribe without word_timestamps."
    )


def attention_decoder_files(
    graphs: Iterable[Path], *, layers: int | None, cache_dir: str | os.PathLike[str] | None = None
) -> dict[Path, Path]:
    """The rewritten copy of each decoder graph file, made once and kept in the inference4py cache.

    Graphs that already output ``cross_attentions.{i}`` map to themselves.

    Raises:
        UnsupportedModelError: see :func:`expose_cross_attentions`.
        ModelLoadError: the ``onnx`` package is missing or a graph cannot be read.
    """
    from inference4py import env
    from inference4py.optimize.onnx_io import import_onnx, save_model

    root = Path(cache_dir).expanduser() if cache_dir is not None else env.inference4py_cache() / "whisper-attention"
    out: dict[Path, Path] = {}
    for graph in graphs:
        st = graph.stat()
        key = hashlib.sha256(
            f"{graph.resolve()}|{st.st_size}|{st.st_mtime_ns}|{ATTENTION_REWRITE_VERSION}".encode()
        ).hexdigest()[:24]
        target = root / key / graph.name
        done = root / key / ".inference4py-attention"
        if done.is_file() and target.is_file():
            out[graph] = target
            continue
        onnx = import_onnx()
        model = onnx.load(str(graph))
        if cross_attention_outputs(o.name for o in model.graph.output):
            out[graph] = graph
            continue
        expose_cross_attentions(model, layers)
        tmp = root / f"{key}.partial-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            save_model(model, tmp / graph.name)
            (tmp / ".inference4py-attention").write_text(f"{graph}\n", encoding="utf-8")
            if (root / key).exists():
                shutil.rmtree(root / key, ignore_errors=True)
            os.replace(tmp, root / key)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _log.info("exposed the cross-attention weights of %s in %s", graph, target)
        out[graph] = target
    return out
