"""RowBatch in growing-cache mode on a cache of one head (DeepSeek-V2's latent attention): rows that
leave, and the columns trimmed after them, leave the other rows' caches intact.

A one-head cache ``[batch, 1, positions, d]`` of one row cut along its positions is contiguous, so
the cut is a view, not a copy; the cache it was cut from (made by a reorder, with its own numpy
memory) is dropped at once.  The batch must own what it keeps: before the fix, the row left alone
read freed memory (NaN logits, or another request's numbers, in a served batch now and then).
"""

from __future__ import annotations

import gc

import numpy as np
import onnxruntime as ort
import pytest

pytest.importorskip("gguf")
pytest.importorskip("onnx")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.engine.rows import RowBatch  # noqa: E402
from inference4py.engine.sessions import value_from_array  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

SHORT = [5, 17, 42, 9]
LONG = [3, 8, 13, 21, 34, 55, 89, 2, 7, 11]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # the conversion goes to this module's tmp, not the user's cache
        mp.setenv("INFERENCE4PY_CACHE", str(tmp_path_factory.mktemp("cache")))
        rt = OnnxTextGenerator.builder().model_path(FIXTURES / "gguf" / "mla-deepseek2-F32.gguf").build()._runtime
    assert not rt.shared_kv and all(rt.layout.empty(e, 1).shape[1] == 1 for e in rt.layout.self_entries)
    return rt


def _alone(rt, ids: list[int]) -> np.ndarray:
    return rt.new_state(1).prefill(np.array([ids]))[0].copy()


def _scribble(shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """NaN arrays of the sizes just freed: memory read after it was freed shows."""
    gc.collect()
    return [np.full(shape, np.nan, np.float32) for shape in shapes for _ in range(4)]


def test_the_row_left_when_a_longer_one_retires_steps_as_alone(runtime):
    batch = RowBatch(runtime, 4)
    first, _ = batch.admit(np.array(LONG))
    second, _ = batch.admit(np.array(SHORT))
    ids = [*SHORT, int(second.argmax())]
    logits = batch.step(np.array([int(first.argmax()), ids[-1]]))
    ids.append(int(logits[1].argmax()))
    shapes = [(1, *v.numpy().shape[1:]) for v in batch._past]  # the reordered cache's size, freed by the trim
    assert batch.retire([0]) == [1]
    assert batch.length == len(ids) - 1  # the padding columns went
    scribbled = _scribble(shapes)
    for _ in range(3):
        logits = batch.step(np.array([ids[-1]]))
        np.testing.assert_allclose(logits[0], _alone(runtime, ids), atol=1e-4, rtol=1e-4)
        ids.append(int(logits[0].argmax()))
    assert scribbled  # kept until the steps ran


def test_a_row_cache_copied_after_the_trim_continues_as_alone(runtime):
    """The prefix cache copies a row's cache when it retires: after a trim it must be the row's own."""
    batch = RowBatch(runtime, 4)
    batch.admit(np.array(LONG))
    logits, _ = batch.admit(np.array(SHORT))
    batch.retire([0])
    _scribble([(1, 1, len(LONG), runtime.layout.empty(e, 1).shape[3]) for e in runtime.layout.self_entries])
    cached = batch.row_cache(0)
    again = RowBatch(runtime, 4)
    continued, _ = again.admit(np.array([*SHORT, int(logits[0].argmax())]), prefix=cached)
    np.testing.assert_allclose(continued[0], _alone(runtime, [*SHORT, int(logits[0].argmax())]), atol=1e-4, rtol=1e-4)


def test_a_value_over_a_view_of_another_value_owns_a_copy():
    owned = np.arange(24, dtype=np.float32).reshape(1, 1, 6, 4)
    first = ort.OrtValue.ortvalue_from_numpy(owned)
    cut = first.numpy()[:, :, 2:]  # contiguous: np.ascontiguousarray would not copy it
    assert cut.flags.c_contiguous and np.shares_memory(cut, owned)
    kept = value_from_array(cut)
    assert not np.shares_memory(kept.numpy(), owned)
    np.testing.assert_array_equal(kept.numpy(), owned[:, :, 2:])
    # an array that owns its memory, or a view of one, is wrapped as it is (no copy)
    assert np.shares_memory(value_from_array(owned[:, :, 2:]).numpy(), owned)
