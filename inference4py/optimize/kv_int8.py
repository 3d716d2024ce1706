"""An int8 KV cache on GroupQueryAttention graphs (``kv_cache("int8")``, ``serve --kv-cache int8``).

What onnxruntime 1.32's ``GroupQueryAttention`` (CPU) does with a quantized cache, as measured on a
one-node graph against the float32 node (tests/engine/test_int8_kv.py keeps the measurements):

* ``k_quant_type`` / ``v_quant_type`` (``"PER_TENSOR"`` or ``"PER_CHANNEL"``) with
  ``kv_cache_bit_width=8`` make ``past_key`` / ``past_value`` int8, and ``present_key`` /
  ``present_value`` come out int8 too (the same type as the past).
* ``k_scale`` / ``v_scale`` (inputs 12 and 13, float32) are *dequantization* scales: a stored value
  ``q`` stands for ``q * scale``.  The kernel quantizes the new keys and values it appends itself,
  ``q = clip(round_half_even(x / scale), -128, 127)``, with the scale it is given: the scales are
  static, fixed in the graph.
* Only the element count of a scale is checked: one element for ``PER_TENSOR``, ``kv_heads *
  head_size`` for ``PER_CHANNEL`` (laid out ``[1, kv_heads, 1, head_size]``, which broadcasts onto
  the ``[batch, kv_heads, seq, head_size]`` cache).
* The shared-buffer mode works unchanged (past and present one int8 buffer): its outputs are
  bit-identical to the growing mode's.

The scales come from a calibration pass (:func:`calibrate_kv`): the float graph prefills a fixed
text and each cache tensor's absolute maximum is taken per ``(kv head, channel)``, widened by
:data:`MARGIN` for values the text did not reach (beyond it values saturate at +-127).  The rewritten
folder is kept in the cache like the fused copies (:func:`int8_kv_folder`), keyed by the hash of every
file of the source folder, with the source's float graph and the scales beside the int8 graph: a
first prompt runs on that float twin (:mod:`inference4py.engine.float_prompt`), because the kernel
reads a quantized cache slowly for many rows.  onnxruntime-genai's builder has the same switch
(``--extra_options kv_cache_quant_type=int8_per_channel``), with scales from a calibration file or
defaults; a folder it quantized runs here as it is.

Granularity: per channel.  Keys carry rotary-rotated projections in which a few channels are far
larger than the rest (the outlier channels KIVI and KVQuant describe); one scale per tensor spends
most of int8's 255 levels on them and leaves the small channels a handful of levels.  A scale per
``(kv head, channel)`` gives each its own range for ``kv_heads * head_size`` floats per layer.  The
kernel has no per-token mode (what KIVI uses for values), so values are per channel as well.
Measured on SmolLM2-135M (Q4_1 GGUF, 8 chunks of 512 tokens, ``benchmarks/kv_quality.py``): perplexity
9.979 with the float32 cache, 10.032 per channel, 10.067 per tensor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError, ModelLoadError, UnsupportedModelError
from inference4py.kv_cache_types import KV_CACHE_TYPES  # what kv_cache() / --kv-cache accept

__all__ = [
    "CALIBRATION_TEXT",
    "GRANULARITIES",
    "KV_CACHE_TYPES",
    "MARGIN",
    "calibrate_kv",
    "int8_kv_folder",
    "quantize_kv_graph",
]

#: onnxruntime's names of the two granularities, by ours.
GRANULARITIES = {"channel": "PER_CHANNEL", "tensor": "PER_TENSOR"}
#: The calibrated absolute maximum is widened by this factor before it becomes the scale.
MARGIN = 1.2
#: Bumped whenever the rewrite or the calibration changes (cached copies of older ones are rebuilt).
KV_INT8_VERSION = 2

_GQA = "GroupQueryAttention"
_K_SCALE, _V_SCALE = 12, 13  # the scales' input slots on GroupQueryAttention
_FLOOR = 1e-6  # the absolute maximum of a channel the text left at zero

#: A fixed text for calibration: prose, dialogue, code, numbers and lists (a few hundred tokens).
CALIBRATION_TEXT = """\
The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the steps as his
father had taught him: one hundred and twelve, never more, never fewer. From the lamp room he could
see the harbour, the fishing boats returning with their nets, and beyond them the grey line where the
sea met the sky. "Storm tonight," he said to nobody in particular, and wrote it in the log.

Q: What is the capital of Australia?
A: Canberra, not Sydney. It was chosen in 1908 as a compromise between Sydney and Melbourne.

def moving_average(values, window=3):
    \"\"\"Return the moving average of a list of numbers.\"\"\"
    if window <= 0:
        raise ValueError("window must be positive")
    return [sum(values[i:i + window]) / window for i in range(len(values) - window + 1)]

Shopping list: 2 kg of potatoes, 500 g of flour, 12 eggs, olive oil, a lemon, fresh basil.
Meeting notes (2024-03-15): revenue grew 7.4% year over year; the team agreed to ship version 2.1
on April 30th, to fix the login bug (#4821) first, and to review the budget of $1,250,000 in June.

In physics, the energy of a photon is E = h * f, where h is Planck's constant (6.626e-34 J s) and
f is the frequency. Water boils at 100 degrees Celsius at sea level, but at lower temperatures on a
mountain, because the air pressure is lower. Les enfants jouaient dans le jardin pendant que la pluie
tombait doucement. Der schnelle braune Fuchs springt über den faulen Hund.

SELECT name, COUNT(*) AS orders FROM customers JOIN orders ON customers.id = orders.customer_id
GROUP BY name ORDER BY orders DESC LIMIT 10;

"Are you coming to dinner?" she asked. "Only if there is dessert," he replied, laughing, and closed
the book he had been reading for three weeks without getting past chapter four.
"""


# --------------------------------------------------------------------------- calibration


def calibrate_kv(folder: str | os.PathLike[str], text: str = CALIBRATION_TEXT) -> dict[str, np.ndarray]:
    """Each self-attention cache input's absolute maximum per (kv head, channel) on ``text``.

    The folder's float graph prefills ``text`` (cut to the model's context) in one run, as the
    engine runs it, and the cache it leaves is read back.

    Returns:
        ``{past input name: [kv_heads, head_size] float32}``.
    """
    from inference4py.engine.decoder import DecoderRuntime
    from inference4py.engine.pipeline import load_pipeline, read_model_config
    from inference4py.tokenization import load_tokenizer

    src = Path(folder)
    runtime = DecoderRuntime(load_pipeline(src), read_model_config(src))
    ids = load_tokenizer(src).encode(text)  # with BOS, as prompts start: its keys are often the largest
    if runtime.max_positions:
        ids = ids[: max(1, runtime.max_positions - 1)]
    state = runtime.new_state(1, capacity=len(ids) + 1)
    state.prefill(np.asarray([ids], dtype=np.int64))
    found: dict[str, np.ndarray] = {}
    for i, entry in enumerate(runtime.layout.self_entries):
        if state.shared_buffer:
            cache = state._kv[entry.input][0][:, :, : len(ids)]  # [1, kv_heads, n, head_size]
        else:
            assert state._past is not None
            cache = state._past[i].numpy()  # [1, kv_heads, n, head_size]
        found[entry.input] = np.abs(cache.astype(np.float32)).max(axis=(0, 2))  # [kv_heads, head_size]
    return found


def _scale(absmax: np.ndarray, granularity: str) -> np.ndarray:
    """The dequantization scale (``x ~ q * scale``) of one cache tensor, shaped for the kernel."""
    top = np.maximum(np.asarray(absmax, dtype=np.float32), _FLOOR) * MARGIN
    if granularity == "tensor":
        return np.array([top.max() / 127.0], dtype=np.float32)  # [1]
    heads, size = top.shape
    return (top / 127.0).astype(np.float32).reshape(1, heads, 1, size)  # [1, kv_heads, 1, head_size]


# --------------------------------------------------------------------------- the rewrite


def quantize_kv_graph(model: Any, absmax: Mapping[str, np.ndarray], *, granularity: str = "channel") -> int:
    """Give every GroupQueryAttention node of ``model`` (an onnx ModelProto, changed in place) an int8 cache.

    Sets ``k_quant_type`` / ``v_quant_type`` and ``kv_cache_bit_width=8``, wires ``k_scale`` /
    ``v_scale`` from new initializers (made from ``absmax`` by past input name) and makes the
    graph's past inputs and present outputs int8.

    Returns:
        The number of nodes rewritten.

    Raises:
        ConfigurationError: no GroupQueryAttention node, or an unknown granularity.
        UnsupportedModelError: a cache is not a graph input / output of its node, is read by
            another float operator, or is quantized already.
    """
    from onnx import TensorProto, helper, numpy_helper

    if granularity not in GRANULARITIES:
        raise ConfigurationError(f"granularity={granularity!r}: use one of {', '.join(GRANULARITIES)}.")
    graph = model.graph
    nodes = [n for n in graph.node if n.op_type == _GQA]
    if not nodes:
        raise ConfigurationError(_NO_GQA.format(what="this graph"))
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}
    infos = {v.name: v for v in graph.value_info}
    cache_names: set[str] = set()
    for node in nodes:
        attrs = {a.name: a for a in node.attribute}
        if any(
            helper.get_attribute_value(attrs[k]) not in (b"NONE", "NONE") for k in attrs if k.endswith("quant_type")
        ):
            raise UnsupportedModelError(f"{node.name} has a quantized KV cache already.")
        past = list(node.input[3:5])
        present = list(node.output[1:3])
        if len(past) != 2 or len(present) != 2 or any(n not in inputs for n in past):
            raise UnsupportedModelError(
                f"{node.name} does not read its past keys / values from graph inputs: the int8 cache changes "
                "the graph's past inputs and present outputs, which this graph does not have."
            )
        if any(n not in outputs for n in present):
            raise UnsupportedModelError(f"{node.name}'s present keys / values are not graph outputs.")
        missing = [n for n in past if n not in absmax]
        if missing:
            raise UnsupportedModelError(f"No calibration of the cache input(s) {', '.join(missing)}.")
        scales = []
        for name, slot in zip(past, (_K_SCALE, _V_SCALE)):
            tensor = numpy_helper.from_array(_scale(absmax[name], granularity), name=f"{name}.int8_scale")
            graph.initializer.append(tensor)
            scales.append((slot, tensor.name))
        while len(node.input) <= _V_SCALE:
            node.input.append("")
        for slot, name in scales:
            node.input[slot] = name
        for key in ("k_quant_type", "v_quant_type", "kv_cache_bit_width"):
            if key in attrs:
                node.attribute.remove(attrs[key])
        node.attribute.extend(
            [
                helper.make_attribute("k_quant_type", GRANULARITIES[granularity]),
                helper.make_attribute("v_quant_type", GRANULARITIES[granularity]),
                helper.make_attribute("kv_cache_bit_width", 8),
            ]
        )
        cache_names.update(past + present)
    for node in graph.node:  # the cache must reach nothing that reads it as float
        if node.op_type not in (_GQA, "Shape") and cache_names.intersection(node.input):
            raise UnsupportedModelError(f"{node.op_type} node {node.name} reads the KV cache as a float tensor.")
    for name in cache_names:
        for value in (inputs.get(name), outputs.get(name), infos.get(name)):
            if value is not None:
                value.type.tensor_type.elem_type = TensorProto.INT8
    return len(nodes)


_NO_GQA = (
    "int8 KV needs a GroupQueryAttention graph: {what} has none. Run a fused folder (builder "
    "fuse_attention(), or `inference4py optimize`), a GGUF conversion or an onnxruntime-genai folder."
)


# --------------------------------------------------------------------------- the cached folder


def _latent_attention(folder: Path) -> bool:
    """The folder's config.json describes multi-head latent attention (``kv_lora_rank``)."""
    import json

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("kv_lora_rank"))


def int8_kv_folder(
    folder: str | os.PathLike[str], *, granularity: str = "channel", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The copy of ``folder`` whose decoder keeps an int8 KV cache, made once and kept in the cache.

    Calibrated on the folder's own float graph (:func:`calibrate_kv`), rewritten
    (:func:`quantize_kv_graph`) and written beside the fused copies (``INFERENCE4PY_CACHE/fused``),
    keyed by the SHA-256 of every file of ``folder``, the granularity and :data:`KV_INT8_VERSION`.
    Only the graph's proto is rewritten: the weights file and the other files are hard links to the
    source's (copies on another file system).

    Raises:
        ConfigurationError: the decoder has no GroupQueryAttention node.
        UnsupportedModelError, ModelLoadError: the graph cannot take an int8 cache / be read.
    """
    from inference4py.engine.float_prompt import FLOAT_GRAPH, SCALES
    from inference4py.engine.graph_io import has_op

    from .folder import _build_entry, _entry_key, _link, _link_folder, _lookup
    from .onnx_io import import_onnx

    src = Path(folder).expanduser()
    graph = _graph_of(src)
    if not has_op(graph, _GQA.encode()):
        if _latent_attention(src):
            raise ConfigurationError(
                f"int8 KV does not apply to {src}: its multi-head latent attention (deepseek2) caches one "
                "latent and one rope key per token, already 8.9x smaller than per-head keys and values at "
                "DeepSeek-V2-Lite's shape; load it without kv_cache('int8')."
            )
        raise ConfigurationError(_NO_GQA.format(what=f"{graph}"))
    if granularity not in GRANULARITIES:
        raise ConfigurationError(f"granularity={granularity!r}: use one of {', '.join(GRANULARITIES)}.")
    level = f"kv-int8-{granularity}-v{KV_INT8_VERSION}"
    root, key, source_hash = _entry_key(src, level, cache_dir)
    out, _refused, found = _lookup(src, root, key, source_hash)
    if found is not None and found != src:
        return found

    def make(source: Path, tmp: Path) -> str:
        onnx = import_onnx()
        absmax = calibrate_kv(source)
        try:
            model = onnx.load(str(graph), load_external_data=False)
        except Exception as exc:  # onnx raises DecodeError / OSError / ValueError
            raise ModelLoadError(f"Could not read {graph} as an ONNX graph: {exc}") from exc
        count = quantize_kv_graph(model, absmax, granularity=granularity)
        _link_folder(source, tmp, skip=graph)
        written = tmp / graph.relative_to(source)
        onnx.save(model, str(written))
        # the float graph stays beside it for first prompts (inference4py.engine.float_prompt), with the scales
        _link(graph, written.parent / FLOAT_GRAPH)
        scales: dict[str, Any] = {name: _scale(top, granularity) for name, top in absmax.items()}
        np.savez(written.parent / SCALES, **scales)
        return f"int8 KV cache ({GRANULARITIES[granularity]}) on {count} GroupQueryAttention nodes"

    return _build_entry(src, root, out, source_hash, level, make=make, what="calibrating an int8 KV cache for")


def _graph_of(folder: Path) -> Path:
    from .folder import _decoder_graph, _genai_graph

    if (folder / "genai_config.json").is_file():
        return _genai_graph(folder)
    return _decoder_graph(folder)
