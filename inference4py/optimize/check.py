"""The numerical check: the original and the fused graph run the same prompt and decode steps.

The original runs as exported (each step's present fed back as past); the fused graph
runs the way inference4py's engine runs it (one KV buffer bound as past and present).
Their last-position logits must agree to float32 precision and pick the same token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from inference4py.errors import UnsupportedModelError

from .match import _NoMatch
from .onnx_io import _session

_log = logging.getLogger("inference4py.optimize")  # the package's logger, as before the split

_CHECK_PROMPT, _CHECK_STEPS = 6, 4


def _check_tokens(vocab: Any) -> list[np.ndarray]:
    """The check's input: a random prompt, then one random token per decode step."""
    rng = np.random.default_rng(0)
    high = vocab if isinstance(vocab, int) and vocab > 0 else 100
    return [rng.integers(0, high, size=(1, _CHECK_PROMPT), dtype=np.int64)] + [
        rng.integers(0, high, size=(1, 1), dtype=np.int64) for _ in range(_CHECK_STEPS)
    ]


def _reference_logits(original: Any) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """The original graph's last-position logits over the check's prompt and steps, as exported
    (each step's present fed back as past): (token chunks, logits per chunk)."""
    try:
        sess = _session(original)
    except Exception as exc:
        raise UnsupportedModelError(f"The original graph does not load in onnxruntime: {str(exc)[:300]}") from exc
    head = next((o for o in sess.get_outputs() if o.name == "logits"), None)
    if head is None:
        raise UnsupportedModelError("the graph has no logits output: it is not a decoder (nothing to fuse)")
    vocab = head.shape[-1]
    chunks = _check_tokens(vocab)
    names = [o.name for o in sess.get_outputs()]
    past: dict[str, np.ndarray] = {}
    logits, total = [], 0
    try:
        for chunk in chunks:
            total += chunk.shape[1]
            out = dict(zip(names, sess.run(names, _feeds(sess, chunk, total, past))))
            past = {n.replace("present", "past_key_values", 1): v for n, v in out.items() if n.startswith("present")}
            logits.append(out["logits"][:, -1].astype(np.float32))
    except _NoMatch as exc:
        raise UnsupportedModelError(f"Attention fusion cannot check this graph: {exc}.") from exc
    except Exception as exc:
        raise UnsupportedModelError(
            f"The original graph does not run a prompt and decode steps: {str(exc)[:300]}"
        ) from exc
    return chunks, logits


def _check(fused: Any, reference: tuple[list[np.ndarray], list[np.ndarray]]) -> float | None:
    """Largest logit difference of the fused graph from the reference (None: too large, or it fails).

    The fused graph runs the way inference4py's engine runs GroupQueryAttention graphs: one
    buffer per cache tensor bound as both past and present, the attention mask as wide as the
    buffer once the prompt is in.
    """
    chunks, expected = reference
    try:
        shared = _SharedRun(_session(fused), capacity=sum(c.shape[1] for c in chunks) + 2)
    except Exception as exc:
        _log.info("fused graph does not load: %s", exc)
        return None
    worst, total = 0.0, 0
    for chunk, ref in zip(chunks, expected):
        total += chunk.shape[1]
        try:
            got = shared.run(chunk, total)
        except Exception as exc:
            _log.info("fused graph check failed to run: %s", exc)
            return None
        if ref.shape != got.shape:
            return None
        diff = float(np.max(np.abs(ref - got)))
        tol = 1e-3 + 1e-3 * float(np.max(np.abs(ref)))
        if not np.isfinite(diff) or diff > tol or int(ref.argmax()) != int(got.argmax()):
            _log.info("fused logits differ by %g (tolerance %g)", diff, tol)
            return None
        worst = max(worst, diff)
    return worst


class _SharedRun:
    """The fused graph with one KV buffer per cache tensor bound as past and present (IO binding)."""

    def __init__(self, sess: Any, capacity: int) -> None:
        import onnxruntime as ort

        from inference4py.engine.sessions import ORT_TO_NUMPY

        self.sess, self.capacity, self.ort = sess, capacity, ort
        self.kv = {}
        self.inputs = {i.name: i for i in sess.get_inputs()}
        for i in sess.get_inputs():
            if i.name.startswith("past_key_values"):
                heads, size = i.shape[1], i.shape[3]
                if not isinstance(heads, int) or not isinstance(size, int):
                    raise _NoMatch(f"cannot size {i.name} {i.shape}")
                arr: np.ndarray = np.zeros((1, heads, capacity, size), dtype=ORT_TO_NUMPY.get(i.type, np.float32))
                self.kv[i.name] = (arr, ort.OrtValue.ortvalue_from_numpy(arr))
        self.dtypes = {n: ORT_TO_NUMPY.get(i.type, np.int64) for n, i in self.inputs.items()}

    def run(self, ids: np.ndarray, total: int) -> np.ndarray:
        n = ids.shape[1]
        binding = self.sess.io_binding()
        keep = []

        def bind(name: str, value: np.ndarray) -> None:
            value = np.ascontiguousarray(value.astype(self.dtypes[name]))
            keep.append(value)
            binding.bind_cpu_input(name, value)

        bind("input_ids", ids)
        if total == n:  # the first prompt: the mask is as wide as the prompt
            bind("attention_mask", np.ones((1, n)))
        else:  # later: the whole buffer, ones over the valid tokens
            bind("attention_mask", (np.arange(self.capacity) < total)[None, :])
        if "position_ids" in self.inputs:
            bind("position_ids", np.arange(total - n, total)[None, :])
        if "num_logits_to_keep" in self.inputs:  # as the engine runs it: the last position only
            bind("num_logits_to_keep", np.array(1))
        binding.bind_output("logits", "cpu")
        for name, (_, value) in self.kv.items():
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_key_values", "present", 1), value)
        self.sess.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()[:, -1].astype(np.float32)


def _feeds(sess: Any, ids: np.ndarray, total: int, past: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    from inference4py.engine.sessions import ORT_TO_NUMPY

    feeds: dict[str, np.ndarray] = {}
    n = ids.shape[1]
    for i in sess.get_inputs():
        dtype = ORT_TO_NUMPY.get(i.type, np.float32)
        if i.name == "input_ids":
            feeds[i.name] = ids.astype(dtype)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones((1, total), dtype=dtype)
        elif i.name == "position_ids":
            feeds[i.name] = np.arange(total - n, total, dtype=dtype)[None, :]
        elif i.name in past:
            feeds[i.name] = past[i.name]
        elif i.name.startswith("past_key_values"):
            shape = [1 if j == 0 else (0 if j == 2 else d) for j, d in enumerate(i.shape)]
            if not all(isinstance(d, int) for d in shape):
                raise _NoMatch(f"cannot size {i.name} {i.shape}")
            feeds[i.name] = np.zeros(shape, dtype=dtype)
        elif i.name == "use_cache_branch":
            feeds[i.name] = np.array([bool(past)])
        else:
            raise _NoMatch(f"the check does not know how to feed input {i.name!r}")
    return feeds
