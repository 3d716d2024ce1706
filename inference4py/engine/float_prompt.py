"""The prompt pass of an int8-cache graph, run on its float twin: the first prompt at sgemm speed.

onnxruntime 1.32's CPU ``GroupQueryAttention`` reads a quantized cache with its fused-dequant
kernels, one row of scores at a time, so a prompt of many tokens on an int8 cache takes 2.5x the
float graph's time (SmolLM2, 2,048 tokens: 10.8 s against 4.3 s on a 2-core AVX2 EPYC).  Decoding
is the other way round: one row per step, where reading a quarter of the bytes wins.

So a folder made by :func:`~inference4py.optimize.kv_int8.int8_kv_folder` keeps its source's float
graph beside the int8 one (:data:`FLOAT_GRAPH`, the same weights files) and the per-channel scales
the int8 graph holds (:data:`SCALES`).  A prompt from an empty cache runs the float graph on a
temporary float buffer; its keys and values are then quantized into the int8 cache exactly as the
kernel quantizes what it appends (``clip(round_half_even(x / scale), -128, 127)``), and decoding
goes on in int8.  Every later run (decode steps, speculative verification, a prompt continuing a
cached prefix) reads the int8 cache as before.

What changes: within the first prompt, attention sees its own keys and values unrounded (the
float model's logits for every prompt position, to the bit), and the cache is what the kernel
would have written for those keys and values.  What it costs: a second session, so the weights
are held twice (``weights_bytes`` counts both).  A request still gives the same tokens alone as in
any batch: the server prefills every request alone, and this pass is the same in a batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import onnxruntime as ort

from inference4py.engine.kv_cache import KVLayout
from inference4py.engine.sessions import run_binding

__all__ = ["FLOAT_GRAPH", "SCALES", "FloatPrompt", "find_float_prompt", "quantize_int8"]

#: The float graph of an int8 folder (a link to its source's graph, same external data).
FLOAT_GRAPH = "kv_int8_float_prompt.onnx"
#: The int8 graph's dequantization scales, by past input name (``[1, kv_heads, 1, head_size]`` or ``[1]``).
SCALES = "kv_int8_scales.npz"


def quantize_int8(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``x`` as GroupQueryAttention stores it in an int8 cache: ``clip(round_half_even(x / scale), -128, 127)``."""
    return np.clip(np.rint(np.asarray(x, dtype=np.float32) / scale), -128, 127).astype(np.int8)


def find_float_prompt(folder: Path) -> tuple[Path, dict[str, np.ndarray]] | None:
    """The float graph and scales an int8 folder keeps for its prompt pass, or None (any other folder)."""
    graph, scales = folder / FLOAT_GRAPH, folder / SCALES
    if not (graph.is_file() and scales.is_file()):
        return None
    with np.load(scales) as held:
        return graph, {name: np.asarray(held[name], dtype=np.float32) for name in held.files}


class PromptGraph(Protocol):
    """What the prompt pass reads of its graph (a ``decoder_base._Graph``)."""

    @property
    def session(self) -> ort.InferenceSession: ...

    @property
    def name(self) -> str: ...

    @property
    def layout(self) -> KVLayout: ...


G = TypeVar("G", bound=PromptGraph)


class FloatPrompt(Generic[G]):
    """Runs a first prompt on the float graph and quantizes its cache into the int8 buffers.

    Args:
        graph: The float twin of the runtime's int8 graph (same inputs, float caches).
        scales: Past input name -> the int8 graph's dequantization scale.
    """

    def __init__(self, graph: G, scales: Mapping[str, np.ndarray]) -> None:
        self.graph = graph
        self.scales = dict(scales)

    def run(
        self,
        pieces: Sequence[Mapping[str, np.ndarray]],
        stores: Mapping[str, np.ndarray],
        n: int,
        capacity: int,
        *,
        options: ort.RunOptions | None = None,
    ) -> list[np.ndarray]:
        """One prompt of ``n`` tokens from an empty cache, in one run or several (a long prompt's pieces, in
        order, on one float cache); returns each run's logits, as the int8 graph's runs would.

        Args:
            pieces: Each run's other inputs (token ids, mask, positions, logits to keep), bound as given.
            stores: Past input name -> the int8 buffer of the rows being prefilled (``[rows, kv_heads,
                cap, head_size]``, written in place at positions ``[0, n)``).
            capacity: Positions of the temporary float buffer (at least ``n``; a sliding window's size).
            options: The runs' options (the last run's: each shrinks the arena, if they say so).
        """
        g = self.graph
        floats: dict[str, np.ndarray] = {}
        values: dict[str, Any] = {}
        for entry in g.layout.self_entries:
            rows, heads, _, size = stores[entry.input].shape
            floats[entry.input] = np.zeros((rows, heads, capacity, size), dtype=entry.dtype)
            values[entry.input] = ort.OrtValue.ortvalue_from_numpy(floats[entry.input])
        out = []
        for feeds in pieces:
            binding = g.session.io_binding()
            for name, value in feeds.items():
                binding.bind_cpu_input(name, value)
            binding.bind_output("logits", "cpu")
            for entry in g.layout.self_entries:
                binding.bind_ortvalue_input(entry.input, values[entry.input])
                binding.bind_ortvalue_output(entry.output, values[entry.input])
            run_binding(g.session, binding, what=g.name, options=options)
            out.append(binding.get_outputs()[0].numpy())
        for name, buffer in floats.items():
            stores[name][:, :, :n] = quantize_int8(buffer[:, :, :n], self.scales[name])
        del values  # the bound values lived until the runs were over
        return out
