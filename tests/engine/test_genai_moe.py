"""onnxruntime-genai mixture-of-experts folders on the native loop: a tiny gpt-oss built by genai's builder.

``genai-gptoss`` has com.microsoft ``MoE`` nodes (fp32), ``genai-gptoss-int4`` ``QMoE`` nodes (4-bit
experts); both have attention sinks and a sliding first layer.  references/genai_moe.json holds
transformers' ids for fp32 (checked against onnxruntime-genai) and onnxruntime-genai's own ids for
int4, all written by tools/fixtures/genai_moe.py.  A folder whose expert node disagrees with its
router or with config.json is refused at load, naming the node and the tensor (onnxruntime itself
finds the first only when the node first runs, mid-generation).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from inference4py import OnnxTextGenerator
from inference4py.engine.graph_io import read_expert_nodes
from inference4py.engine.pipeline import load_pipeline
from inference4py.errors import ModelLoadError
from tests.conftest import FIXTURES, load_reference

REFS = load_reference("genai_moe")
MODELS = REFS["models"]
_generators: dict[str, OnnxTextGenerator] = {}


def generator(name: str) -> OnnxTextGenerator:
    if name not in _generators:
        _generators[name] = OnnxTextGenerator.builder().model_path(FIXTURES / MODELS[name]["folder"]).build()
    return _generators[name]


def _cases(kinds=("text", "chat")):
    for name, model in MODELS.items():
        for case in model["cases"]:
            if case["kind"] in kinds:
                yield pytest.param(name, case, id=f"{name}-{case['name']}")


def _prompt(case: dict):
    return case["messages"] if case["kind"] == "chat" else case["prompt"]


@pytest.mark.parametrize("name", list(MODELS))
def test_the_folder_has_the_experts_the_references_name(name):
    spec = load_pipeline(FIXTURES / MODELS[name]["folder"])
    assert spec.source == "genai_config.json"
    nodes = read_expert_nodes(spec.path("decoder"))
    assert nodes and {n.op_type for n in nodes} == {MODELS[name]["moe_op"]}
    for node in nodes:
        assert node.attributes["k"] == REFS["top_k"]
        assert node.shapes[node.inputs[2]][0] == REFS["experts"]
        assert node.shapes[node.inputs[1]][-1] == REFS["experts"]  # the router's declared width


def test_a_dense_graph_has_no_expert_nodes():
    assert read_expert_nodes(FIXTURES / "models" / "genai-llama" / "model.onnx") == []


@pytest.mark.parametrize("name,case", list(_cases()))
def test_native_loop_reproduces_the_reference_ids(name, case):
    gen = generator(name)
    assert gen.encode_prompt(_prompt(case)) == case["prompt_ids"]
    got = list(gen.generate(_prompt(case), max_new_tokens=case["max_new_tokens"], do_sample=False).token_ids)
    n = case.get("stable_prefix", len(case["output_ids"]))
    assert got[:n] == case["output_ids"][:n]
    if n == len(case["output_ids"]):
        assert got == case["output_ids"]


def test_the_long_case_runs_past_the_sliding_window():
    long = next(c for c in MODELS["genai-gptoss"]["cases"] if c["name"] == "long")
    assert long["window_acts"] and long["full_attention_ids"] != long["output_ids"]
    assert generator("genai-gptoss")._runtime.min_capacity >= REFS["window"]


@pytest.mark.parametrize("name,case", list(_cases(kinds=("beam",))))
def test_beam_search_equals_transformers(name, case):
    settings = {k: v for k, v in case["settings"].items() if k != "do_sample"}
    result = generator(name).generate(
        case["prompt"], max_new_tokens=case["max_new_tokens"], do_sample=False, **settings
    )
    assert [list(c.token_ids) for c in result.candidates] == case["sequences"]


def test_a_padded_batch_gives_every_row_its_reference():
    cases = [c for c in MODELS["genai-gptoss"]["cases"] if c["kind"] == "text"][:4]
    n = min(c["max_new_tokens"] for c in cases)
    results = generator("genai-gptoss").generate_batch([c["prompt"] for c in cases], max_new_tokens=n, do_sample=False)
    assert [list(r.token_ids) for r in results] == [c["output_ids"][:n] for c in cases]


@pytest.mark.parametrize("name", list(MODELS))
def test_same_ids_as_onnxruntime_genai_on_the_same_folder(name):
    og = pytest.importorskip("onnxruntime_genai")
    case = MODELS[name]["cases"][0]
    model = og.Model(str(FIXTURES / MODELS[name]["folder"]))
    params = og.GeneratorParams(model)
    # genai refuses a KV buffer below the window
    params.set_search_options(
        max_length=max(len(case["prompt_ids"]) + case["max_new_tokens"], REFS["window"]), do_sample=False
    )
    runner = og.Generator(model, params)
    runner.append_tokens(case["prompt_ids"])
    ids: list[int] = []
    while len(ids) < case["max_new_tokens"] and not runner.is_done():
        runner.generate_next_token()
        ids.append(int(runner.get_next_tokens()[0]))
    native = generator(name).generate(list(case["prompt_ids"]), max_new_tokens=case["max_new_tokens"], do_sample=False)
    assert list(native.token_ids) == ids


# --------------------------------------------------------------------------- bad input


def _broken_copy(tmp_path, edit):
    """genai-gptoss copied to tmp_path with ``edit(first MoE node, graph)`` applied to its graph."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    folder = tmp_path / "genai-gptoss"
    shutil.copytree(FIXTURES / MODELS["genai-gptoss"]["folder"], folder)
    model = onnx.load(str(folder / "model.onnx"))
    node = next(n for n in model.graph.node if n.op_type == "MoE")
    edit(node, model.graph, numpy_helper)
    (folder / "model.onnx.data").unlink()
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    return folder


def _drop_last_expert(node, graph, numpy_helper):
    names = {node.input[i] for i in (2, 3, 4, 5) if i < len(node.input) and node.input[i]}
    for init in graph.initializer:
        if init.name in names:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init)[:-1].copy(), init.name))


def test_expert_weights_that_disagree_with_the_router_are_refused(tmp_path):
    folder = _broken_copy(tmp_path, _drop_last_expert)
    with pytest.raises(ModelLoadError) as err:
        load_pipeline(folder)
    message = str(err.value)
    assert "model.onnx" in message and "/model/layers.0/moe/MoE" in message
    assert f"have {REFS['experts']} columns" in message and f"hold {REFS['experts'] - 1} experts" in message


def test_one_expert_tensor_with_another_count_is_named(tmp_path):
    def edit(node, graph, numpy_helper):
        bias = next(i for i in graph.initializer if i.name == node.input[5])  # fc2 bias
        bias.CopyFrom(numpy_helper.from_array(np.concatenate([numpy_helper.to_array(bias)] * 2), bias.name))

    with pytest.raises(ModelLoadError, match=r"fc2 bias '.*down_proj\.bias' hold 8 experts, its fc1 weights"):
        load_pipeline(_broken_copy(tmp_path, edit))


def test_more_experts_per_token_than_experts_is_refused(tmp_path):
    def edit(node, graph, numpy_helper):
        next(a for a in node.attribute if a.name == "k").i = REFS["experts"] + 1

    with pytest.raises(
        ModelLoadError, match=rf"k={REFS['experts'] + 1} experts per token, but it has {REFS['experts']}"
    ):
        OnnxTextGenerator.builder().model_path(_broken_copy(tmp_path, edit)).build()


def test_a_config_json_with_another_expert_count_is_refused(tmp_path):
    folder = tmp_path / "genai-gptoss"
    shutil.copytree(FIXTURES / MODELS["genai-gptoss"]["folder"], folder)
    (folder / "config.json").write_text(json.dumps({"num_local_experts": 8, "num_experts_per_tok": REFS["top_k"]}))
    with pytest.raises(ModelLoadError, match=r"hold 4 experts .* but config\.json says 8"):
        load_pipeline(folder)
    (folder / "config.json").write_text(json.dumps({"num_local_experts": REFS["experts"], "num_experts_per_tok": 3}))
    with pytest.raises(ModelLoadError, match=r"k=2 experts per token, but config\.json says num_experts_per_tok=3"):
        load_pipeline(folder)
