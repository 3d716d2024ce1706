"""KV-cache names: exporter conventions, structural pairing, declared patterns, geometry."""

from __future__ import annotations

import numpy as np
import pytest

from inference4py.engine.kv_cache import CacheNames, check_cache_names, detect_cache_names, discover_layout
from inference4py.engine.sessions import TensorInfo
from inference4py.errors import PipelineSpecError, UnsupportedModelError


def io(inputs: dict[str, tuple], outputs: dict[str, tuple], dtype=np.float32):
    def infos(table):
        return {
            n: TensorInfo(n, np.int64 if n in ("input_ids", "attention_mask") else dtype, s) for n, s in table.items()
        }

    return infos(inputs), infos(outputs)


PAST = ("B", 2, "P", 8)
TOTAL = ("B", 2, "T", 8)


def decoder_io(past: str, present: str, layers: int = 2, kinds=("key", "value"), extra_out: dict | None = None):
    inputs = {"input_ids": ("B", "S"), "attention_mask": ("B", "T")}
    outputs = {"logits": ("B", "S", 10)}
    for i in range(layers):
        for k in kinds:
            inputs[past.format(i=i, k=k)] = PAST
            outputs[present.format(i=i, k=k)] = TOTAL
    outputs.update(extra_out or {})
    return io(inputs, outputs)


@pytest.mark.parametrize(
    "past,present,expected",
    [
        ("past_key_values.{i}.{k}", "present.{i}.{k}", "past_key_values.{layer}.key"),
        ("past_key_values_{i}_{k}", "present_{i}_{k}", "past_key_values_{layer}_key"),
    ],
)
def test_exporter_conventions(past, present, expected):
    names, cross = detect_cache_names(*decoder_io(past, present))
    assert names.format == "separate" and names.pairs[0][0] == expected and cross is None


def test_encoder_decoder_convention_has_a_cross_cache():
    inputs, outputs = decoder_io("past_key_values.{i}.decoder.{k}", "present.{i}.decoder.{k}")
    more_in, more_out = decoder_io("past_key_values.{i}.encoder.{k}", "present.{i}.encoder.{k}")
    names, cross = detect_cache_names({**inputs, **more_in}, {**outputs, **more_out})
    assert names.pairs[1] == ("past_key_values.{layer}.decoder.value", "present.{layer}.decoder.value")
    assert cross.pairs[0] == ("past_key_values.{layer}.encoder.key", "present.{layer}.encoder.key")
    layout = discover_layout({**inputs, **more_in}, {**outputs, **more_out})
    assert len(layout.self_entries) == 4 and len(layout.cross_entries) == 4


def test_genai_whisper_convention():
    inputs, outputs = io(
        {
            "input_ids": ("B", "S"),
            "past_key_self_0": PAST,
            "past_value_self_0": PAST,
            "past_key_cross_0": PAST,
            "past_value_cross_0": PAST,
        },
        {"logits": ("B", "S", 10), "present_key_self_0": TOTAL, "present_value_self_0": TOTAL},
    )
    names, cross = detect_cache_names(inputs, outputs)
    assert names.pairs[0] == ("past_key_self_{layer}", "present_key_self_{layer}")
    assert cross.pairs[1] == ("past_value_cross_{layer}", "present_value_cross_{layer}")
    layout = discover_layout(inputs, outputs)
    assert [e.output for e in layout.cross_entries] == ["", ""]  # consumed, not returned


def test_gpt2_combined_convention():
    inputs, outputs = io(
        {"input_ids": ("B", "S"), "past_0": (2, "B", 4, "P", 8), "past_1": (2, "B", 4, "P", 8)},
        {"logits": ("B", "S", 10), "present_0": (2, "B", 4, "T", 8), "present_1": (2, "B", 4, "T", 8)},
    )
    layout = discover_layout(inputs, outputs)
    assert layout.names.format == "combined"
    assert layout.num_kv_heads == 4 and layout.head_dim == 8
    assert layout.empty(layout.entries[0], 3).shape == (2, 3, 4, 0, 8)
    assert layout.entries[0].batch_axis == 1 and layout.entries[0].seq_axis == 3


def test_structural_pairing_by_name_ending():
    names, _ = detect_cache_names(*decoder_io("kv_in.{i}.{k}", "kv_out.{i}.{k}", kinds=("k", "v")))
    assert names.to_json() == {
        "format": "separate",
        "past_key_pattern": "kv_in.{layer}.k",
        "past_value_pattern": "kv_in.{layer}.v",
        "present_key_pattern": "kv_out.{layer}.k",
        "present_value_pattern": "kv_out.{layer}.v",
    }


def test_structural_pairing_falls_back_to_graph_order():
    inputs, outputs = io(
        {"input_ids": ("B", "S"), "cache_a_0": PAST, "cache_b_0": PAST},
        {"logits": ("B", "S", 10), "new_x_0": TOTAL, "new_y_0": TOTAL},
    )
    names, _ = detect_cache_names(inputs, outputs)
    assert names.pairs == (("cache_a_{layer}", "new_x_{layer}"), ("cache_b_{layer}", "new_y_{layer}"))


def test_graphs_without_cache_have_no_names():
    inputs, outputs = io({"input_ids": ("B", "S"), "attention_mask": ("B", "S")}, {"logits": ("B", "S", 10)})
    assert detect_cache_names(inputs, outputs) == (None, None)
    assert discover_layout(inputs, outputs).entries == ()


def test_detected_cache_input_without_output_is_refused():
    inputs, outputs = decoder_io("past_key_values.{i}.{k}", "present.{i}.{k}")
    del outputs["present.1.value"]
    with pytest.raises(PipelineSpecError, match="'past_key_values.1.value' but no output 'present.1.value'"):
        discover_layout(inputs, outputs)


def test_declared_names_are_checked():
    inputs, outputs = decoder_io("kv_in.{i}.{k}", "kv_out.{i}.{k}")
    good = CacheNames.separate("kv_in.{layer}.key", "kv_in.{layer}.value", "kv_out.{layer}.key", "kv_out.{layer}.value")
    check_cache_names(inputs, outputs, good, graph_name="g", declared=True)
    assert len(discover_layout(inputs, outputs, names=good).self_entries) == 4
    typo = CacheNames.separate("kv_in.{layer}.key", "kv_in.{layer}.value", "kv_out.{layer}.k", "kv_out.{layer}.value")
    with pytest.raises(PipelineSpecError, match="no output 'kv_out.0.k'"):
        check_cache_names(inputs, outputs, typo, graph_name="g", declared=True)
    nothing = CacheNames.combined("past_{layer}", "present_{layer}")
    with pytest.raises(PipelineSpecError, match="match no input"):
        check_cache_names(inputs, outputs, nothing, graph_name="g", declared=True)
    with pytest.raises(PipelineSpecError, match="exactly once"):
        CacheNames.combined("past_{layer}_{layer}", "present_{layer}")
    with pytest.raises(PipelineSpecError, match="Unknown kv_cache format"):
        CacheNames("paged", ())


def test_symbolic_head_size_comes_from_the_description_then_config():
    sym = ("B", 2, "P", "head")
    inputs, outputs = io(
        {"input_ids": ("B", "S"), "past_key_values.0.key": sym, "past_key_values.0.value": sym},
        {"logits": ("B", "S", 10), "present.0.key": sym, "present.0.value": sym},
    )
    assert discover_layout(inputs, outputs, head_size=16).head_dim == 16
    assert discover_layout(inputs, outputs, {"hidden_size": 64, "num_attention_heads": 4}).head_dim == 16
    layout = discover_layout(inputs, outputs, head_size=16)
    assert layout.num_kv_heads == 2  # static dim wins
    assert layout.empty(layout.entries[0], 1).shape == (1, 2, 0, 16)
    with pytest.raises(UnsupportedModelError, match="head_size"):
        discover_layout(inputs, outputs)
