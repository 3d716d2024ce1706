"""Weight-only quantization of a model folder with onnxruntime's MatMulNBits quantizer.

``inference4py quantize FOLDER OUT --bits 4`` turns the MatMul weights of every
ONNX graph in a folder into 4-bit (or 8-bit) blocks, so optimum exports run in
int4 like onnxruntime-genai's int4 builds.  The other files of the folder
(config, tokenizer, generation config) are copied as they are.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from inference4py.errors import ConfigurationError, ModelLoadError, ModelNotFoundError

__all__ = ["quantize_folder"]


def quantize_folder(
    folder: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    bits: int = 4,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int | None = 4,
) -> list[Path]:
    """Quantize every ``*.onnx`` of ``folder`` into ``out``; returns the written graphs.

    Args:
        bits: 4 or 8 bits per weight.
        block_size: weights per quantization block (a power of two >= 16).
        symmetric: symmetric blocks (no zero point).
        accuracy_level: MatMulNBits compute precision (4 = int8 activations, fastest on CPU).

    Raises:
        ModelNotFoundError: no folder or no ONNX graph in it.
        ConfigurationError: invalid bits / block size, or ``out`` is ``folder``.
        ModelLoadError: the ``onnx`` package is missing or a graph cannot be quantized.
    """
    src, dst = Path(folder).expanduser(), Path(out).expanduser()
    if bits not in (4, 8):
        raise ConfigurationError(f"bits={bits} is not supported: use 4 or 8.")
    if block_size < 16 or block_size & (block_size - 1):
        raise ConfigurationError(f"block_size={block_size} must be a power of two >= 16 (32 is a good default).")
    if not src.is_dir():
        raise ModelNotFoundError(f"Model folder {src} does not exist.")
    if dst.resolve() == src.resolve():
        raise ConfigurationError("The output folder must differ from the model folder: quantized graphs replace files.")
    graphs = sorted(p for p in src.rglob("*.onnx"))
    if not graphs:
        raise ModelNotFoundError(f"{src} holds no .onnx file to quantize.")
    try:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    except ImportError as exc:
        raise ModelLoadError(
            f'Quantizing needs the {exc.name or "onnx"} package: pip install "inference4py[quantize]" '
            "(onnx and onnx_ir)."
        ) from exc
    # The quantizer logs every node at INFO level; keep only its warnings.
    for name in ("onnxruntime.quantization", "onnxruntime.quantization.matmul_nbits_quantizer"):
        logging.getLogger(name).setLevel(logging.WARNING)

    dst.mkdir(parents=True, exist_ok=True)
    for item in src.rglob("*"):
        rel = item.relative_to(src)
        if item.is_file() and item.suffix != ".onnx" and not item.name.endswith((".onnx_data", ".onnx.data")):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(item, dst / rel)
    written = []
    for graph in graphs:
        target = dst / graph.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            model = onnx.load(str(graph))
            _fold_weight_transposes(model)
            quantizer = MatMulNBitsQuantizer(
                model, bits=bits, block_size=block_size, is_symmetric=symmetric, accuracy_level=accuracy_level
            )
            quantizer.process()
            big = quantizer.model.model.ByteSize() > 1_800_000_000
            quantizer.model.save_model_to_file(str(target), use_external_data_format=big)
        except Exception as exc:  # onnx / onnxruntime raise many types here
            raise ModelLoadError(f"Could not quantize {graph.name}: {str(exc)[:300]}") from exc
        written.append(target)
    return written


def _fold_weight_transposes(model: Any) -> int:  # an onnx.ModelProto
    """Give MatMuls that read ``Transpose(initializer)`` a transposed initializer of their own.

    Exports of models with tied embeddings feed the output projection through a Transpose of
    the embedding matrix; onnxruntime folds it when the session loads, but the quantizer only
    quantizes MatMuls whose weight is an initializer, so without this the largest matrix
    (vocabulary x hidden) would stay in fp32.  The embedding itself is left as it is.
    Returns the number of MatMuls rewired.
    """
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    folded: dict[str, str] = {}
    count = 0
    for node in graph.node:
        if node.op_type != "MatMul" or len(node.input) != 2 or node.input[1] in inits:
            continue
        tr = producer.get(node.input[1])
        if tr is None or tr.op_type != "Transpose" or tr.input[0] not in inits:
            continue
        perm = next((list(a.ints) for a in tr.attribute if a.name == "perm"), None)
        if perm not in (None, [1, 0]):
            continue
        name = folded.get(tr.output[0])
        if name is None:
            array = numpy_helper.to_array(inits[tr.input[0]])
            if array.ndim != 2:
                continue
            name = tr.output[0] + "/folded"
            graph.initializer.append(numpy_helper.from_array(array.T.copy(), name))
            folded[tr.output[0]] = name
        node.input[1] = name
        count += 1
    if count:  # drop Transposes nothing reads any more
        used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        keep = [
            n
            for n in graph.node
            if not (n.op_type == "Transpose" and n.output[0] in folded and n.output[0] not in used)
        ]
        del graph.node[:]
        graph.node.extend(keep)
    return count
