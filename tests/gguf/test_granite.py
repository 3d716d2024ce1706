"""IBM Granite GGUF files (``granite``, ``granitemoe``): the four scalars and the routing, as the graph holds them.

Their parity with transformers (greedy, beam, Q8_0, compiled operators) is checked with the other
mixture-of-experts families in tests/gguf/test_moe.py, on the files of moe-granite-references.json
(tools/fixtures/gguf_moe.py --families granitemoe granitemoeshared granite).  Here: what the graph and
config.json hold, and the files refused with the key named.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")

from inference4py.errors import ModelLoadError, UnsupportedModelError  # noqa: E402
from inference4py.gguf.graph import write_decoder  # noqa: E402
from inference4py.gguf.reader import GGUFFile  # noqa: E402
from tests.gguf.references import GGUF_DIR, load, rewrite  # noqa: E402

MODELS = load("moe-granite-references.json")["models"]
MOE, SHARED, DENSE = "moe-granitemoe-F32.gguf", "moe-granitemoeshared-F32.gguf", "moe-granite-F32.gguf"


def _graph(name: str, folder: Path) -> tuple[dict, onnx.GraphProto]:
    config = write_decoder(GGUFFile(GGUF_DIR / name), folder, 32)
    return config, onnx.load(str(folder / "model.onnx")).graph


def _scalar(graph: onnx.GraphProto, node: onnx.NodeProto) -> float:
    values = {t.name: t for t in graph.initializer}
    value = onnx.numpy_helper.to_array(values[node.input[1]])
    assert value.size == 1
    return float(value.reshape(-1)[0])


@pytest.mark.parametrize("name", [MOE, SHARED, DENSE])
def test_the_four_scalars_are_the_files(name, tmp_path):
    config, graph = _graph(name, tmp_path)
    want = MODELS[name]["granite_scalars"]
    assert {k: config[k] for k in want} == want
    nodes = {n.name: n for n in graph.node}
    assert _scalar(graph, nodes["/model/embed_tokens/Mul_scale"]) == want["embedding_multiplier"]
    assert _scalar(graph, nodes["/lm_head/logit_scale/Div"]) == want["logits_scaling"]
    assert nodes["/lm_head/logit_scale/Div"].output[0] == "logits"  # the last thing done to the logits
    for i in range(config["num_hidden_layers"]):
        for part in ("attn", "mlp"):
            assert _scalar(graph, nodes[f"/model.layers.{i}/{part}/residual_scale"]) == want["residual_multiplier"]
    attention = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert [a.f for n in attention for a in n.attribute if a.name == "scale"] == [want["attention_multiplier"]] * 2


def test_granitemoe_routes_by_the_softmax_of_the_k_best_logits(tmp_path):
    """GraniteMoe's gating: TopK of the router's logits, then a softmax over those k (no softmax over all)."""
    _, graph = _graph(MOE, tmp_path)
    producers = {o: n for n in graph.node for o in n.output}
    topk = [n for n in graph.node if n.op_type == "TopK"]
    assert len(topk) == 2
    for node in topk:
        assert producers[node.input[0]].name.endswith(".gate/MatMul")  # the router's logits themselves
        consumers = [n for n in graph.node if node.output[0] in n.input]
        assert [n.op_type for n in consumers] == ["Softmax"]
    assert not [n for n in graph.node if n.op_type == "ReduceSum" and "/router/" in n.name]


def test_granitemoeshared_adds_its_shared_expert_ungated(tmp_path):
    config, graph = _graph(SHARED, tmp_path)
    assert config["shared_expert_intermediate_size"] == 48
    assert not [n for n in graph.node if "shared_expert_gate" in n.name]  # Qwen2-MoE's sigmoid gate: not here
    assert len([n for n in graph.node if n.name.endswith("shared_expert.down_proj/MatMul")]) == 2


@pytest.mark.parametrize(
    "keys,error,match",
    [
        ({"granitemoe.logit_scale": None}, ModelLoadError, r"'granitemoe\.logit_scale'"),
        ({"granitemoe.logit_scale": 0.0}, ModelLoadError, r"granitemoe\.logit_scale = 0; the logits are divided"),
        ({"granitemoe.rope.scaling.finetuned": False}, UnsupportedModelError, r"granitemoe\.rope\.scaling\.finetuned"),
        ({"granitemoe.embedding_scale": float("nan")}, ModelLoadError, r"granitemoe\.embedding_scale = nan"),
    ],
)
def test_bad_scalars_are_refused_by_their_key(tmp_path, keys, error, match):
    bad = rewrite(MOE, tmp_path / "bad.gguf", keys=keys)
    with pytest.raises(error, match=match):
        write_decoder(GGUFFile(bad), tmp_path / "out", 32)


def test_a_shared_expert_length_that_disagrees_names_the_key(tmp_path):
    bad = rewrite(SHARED, tmp_path / "bad.gguf", keys={"granitemoe.expert_shared_feed_forward_length": 64})
    with pytest.raises(ModelLoadError, match=r"granitemoe\.expert_shared_feed_forward_length says 64"):
        write_decoder(GGUFFile(bad), tmp_path / "out", 32)


def test_a_declared_shared_expert_without_its_tensors_is_named(tmp_path):
    dropped = tuple(f"blk.{i}.ffn_{w}_shexp.weight" for i in (0, 1) for w in ("gate", "up", "down"))
    bad = rewrite(SHARED, tmp_path / "bad.gguf", drop=dropped)
    with pytest.raises(ModelLoadError, match=r"no tensor 'blk\.0\.ffn_up_shexp\.weight'"):
        write_decoder(GGUFFile(bad), tmp_path / "out", 32)


def test_an_absent_attention_scale_leaves_one_over_sqrt_head_dim(tmp_path):
    """llama.cpp: a missing (or zero) attention.scale is 1/sqrt(head_dim)."""
    plain = rewrite(DENSE, tmp_path / "plain.gguf", keys={"granite.attention.scale": None})
    (tmp_path / "out").mkdir()
    write_decoder(GGUFFile(plain), tmp_path / "out", 32)
    graph = onnx.load(str(tmp_path / "out" / "model.onnx"), load_external_data=False).graph
    scales = {a.f for n in graph.node if n.op_type == "GroupQueryAttention" for a in n.attribute if a.name == "scale"}
    assert scales == {np.float32(1 / 4)}
