"""Mixture-of-experts GGUF decoders (inference4py.gguf.moe): greedy and beam parity with transformers.

tools/fixtures/gguf_moe.py builds tiny random Qwen3-MoE, OLMoE, Mixtral and Qwen2-MoE checkpoints,
writes each to an F32 GGUF with llama.cpp's own convert_hf_to_gguf.py and records transformers'
greedy and beam (num_beams=3) ids, with seeds whose logit and routing gaps are clear.  Each file is
converted here (float32, the experts on the exact Gather + MatMul path) and run through the library's
normal load path; the ids must be transformers'.  Files whose experts disagree with their metadata,
an unknown router and a missing shared-expert gate are refused with the tensor or key named.
The Granite files (moe-granite-references.json: GraniteMoe, GraniteMoeShared and dense Granite, with
their four scalars) run through the same checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ModelLoadError, UnsupportedModelError  # noqa: E402
from inference4py.gguf.convert import gguf_folder  # noqa: E402
from inference4py.gguf.graph import write_decoder  # noqa: E402
from inference4py.gguf.reader import GGUFFile  # noqa: E402
from tests.gguf.references import (  # noqa: E402
    GGUF_DIR,
    agreement,
    batched,
    beam,
    case_params,
    generator_fixture,
    greedy,
    load,
    rewrite,
    stable,
)
from tests.gguf.test_graph import float_activations, write_folder  # noqa: E402

REF = load("moe-references.json")
MODELS: dict[str, Any] = REF["models"] | load("moe-granite-references.json")["models"]
MOE = [n for n, m in MODELS.items() if m["experts"]]  # dense Granite has no router

generator = generator_fixture(MODELS)


def test_the_fixtures_cover_the_families_with_clear_gaps():
    families = ("qwen3moe", "olmoe", "mixtral", "qwen2moe", "granitemoe", "granitemoeshared", "granite")
    assert {(m["family"], m["type"]) for m in MODELS.values()} == {(f, t) for f in families for t in ("F32", "Q8_0")}
    for name, entry in MODELS.items():
        assert (GGUF_DIR / name).stat().st_size < 600_000
        if entry["experts"]:  # dense Granite: no router, its gaps recorded as null
            assert entry["experts_per_token"] == 2 and entry["experts"] in (4, 8)
        if entry["experts"] and entry["type"] == "F32":  # Q8_0 gaps are recorded only (GraniteMoeShared's: 9.8e-4)
            assert entry["min_route_gap"] >= REF["min_route_gap"], name
        for case in entry["cases"]:
            assert case["beam"]["robust_to_noise"], f"{name} {case['name']}"
        if entry["type"] == "F32":  # the seeds were chosen on these: no near-tie anywhere
            assert entry["min_logit_gap"] >= REF["min_logit_gap"]
            for case in entry["cases"]:
                assert case["stable_prefix"] == len(case["output_ids"])
                # llama.cpp reads the file as transformers computes the checkpoint (llama-server, f32 KV, -fa off)
                assert case["llama_cpp_ids"] == case["output_ids"], f"{name} {case['name']}"
    # the normalisations llama.cpp applies, as the checkpoints were configured
    assert {m["family"]: m["norm_topk_prob"] for m in MODELS.values()} == {
        "qwen3moe": True,
        "olmoe": False,
        "mixtral": True,
        "qwen2moe": False,
        "granitemoe": True,  # the softmax of the k chosen logits: weights that sum to 1
        "granitemoeshared": True,
        "granite": True,  # dense: no router (transformers' default recorded)
    }


@pytest.mark.parametrize("name,case", case_params(MODELS))
def test_greedy_ids_equal_transformers(generator, name, case):
    """F32 files, and Q8_0 files against transformers on their dequantized weights (the experts too)."""
    assert greedy(generator(name, 32), case)[: case["stable_prefix"]] == stable(case)


@pytest.mark.parametrize("name,case", case_params(MODELS))
def test_beam_ids_equal_transformers(generator, name, case):
    assert beam(generator(name, 32), case) == case["beam"]["output_ids"]


@pytest.mark.parametrize("name,case", case_params(MODELS, "F32"))
def test_the_default_width_of_an_f32_file_is_the_float_path(generator, name, case):
    assert greedy(generator(name, None), case) == case["output_ids"]


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m["type"] == "Q8_0"])
def test_a_q8_0_file_as_it_holds_it_computes_with_its_exact_weights(generator, name, tmp_path, record_property):
    """The default width: attention, router and head on 8-bit MatMulNBits with the file's own blocks, the
    experts dequantized to float32.  With float32 activations (MatMulNBits accuracy level 0) it gives
    transformers' ids on the dequantized file; the graph as converted rounds the activations of the
    block products to 8 bits (level 4, as llama.cpp's q8 dot products), and its agreement is recorded."""
    gen = generator(name, None)
    exact = float_activations(generator.folder(name, None), tmp_path / "f32act")
    exact_gen = OnnxTextGenerator.builder().model_path(exact).build()
    for case in MODELS[name]["cases"]:
        assert greedy(exact_gen, case)[: case["stable_prefix"]] == stable(case), case["name"]
    record_property("steps_before_first_difference_at_level_4", agreement(gen, MODELS[name]["cases"]))


def test_the_graph_gathers_only_the_chosen_experts(tmp_path):
    config = write_decoder(GGUFFile(GGUF_DIR / "moe-qwen2moe-F32.gguf"), tmp_path, 32)
    graph = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False).graph
    topk = [n for n in graph.node if n.op_type == "TopK"]
    gathers = [n for n in graph.node if n.op_type == "Gather" and ".experts." in n.name]
    assert len(topk) == 2 and len(gathers) == 2 * 2  # gate+up and down, per layer
    assert {n.input[1] for n in gathers} == {n.output[1] for n in topk}  # indexed by the router's choice
    assert (config["num_experts"], config["num_experts_per_tok"], config["shared_expert_intermediate_size"]) == (
        4,
        2,
        48,
    )


@pytest.mark.parametrize("name", MOE)
def test_on_the_compiled_operators_the_experts_are_the_files_blocks_in_place(compiled, name):
    folder, _ = compiled(name)
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    experts = [n for n in graph.node if n.op_type == "GgmlExpertMatMul"]
    assert len(experts) == 2 * 2  # gate+up (one product, silu inside) and down, per layer
    assert not [n for n in graph.node if n.op_type == "Gather" and ".experts." in n.name]
    topk = {n.output[1] for n in graph.node if n.op_type == "TopK"}
    assert {n.input[1] for n in experts} == topk  # indexed by the router's choice
    source = GGUFFile(GGUF_DIR / name)
    external = {t.name: {e.key: e.value for e in t.external_data} for t in graph.initializer if t.external_data}
    for node in experts:
        for weight in node.input[2:]:
            assert external[weight]["location"] == name
            assert (int(external[weight]["offset"]), int(external[weight]["length"])) == source.span(weight)


@pytest.mark.parametrize("name,case", case_params(MODELS))
def test_on_the_compiled_operators_greedy_ids_equal_transformers(compiled, name, case):
    """F32 files as converted (float32 products), Q8_0 files with float32 activations (their exact weights)."""
    folder, exact = compiled(name)
    gen = OnnxTextGenerator.builder().model_path(folder if MODELS[name]["type"] == "F32" else exact).build()
    assert greedy(gen, case)[: case["stable_prefix"]] == stable(case)


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m["type"] == "Q8_0"])
def test_on_the_compiled_operators_llama_cpp_rounding_agreement_is_recorded(compiled, name, record_property):
    folder, _ = compiled(name)
    gen = OnnxTextGenerator.builder().model_path(folder).build()
    record_property("steps_before_first_difference_q8_activations", agreement(gen, MODELS[name]["cases"]))


# ---------------------------------------------------------------------------------- bad files


def _convert(path: Path, tmp_path: Path) -> None:
    write_decoder(GGUFFile(path), tmp_path / "out", 32)


def test_an_expert_count_that_disagrees_with_the_tensors_names_both(tmp_path):
    bad = rewrite("moe-qwen3moe-F32.gguf", tmp_path / "bad.gguf", keys={"qwen3moe.expert_count": 6})
    with pytest.raises(ModelLoadError, match=r"'blk\.0\.ffn_gate_inp\.weight' has shape \[8, 32\].*expert_count = 6"):
        _convert(bad, tmp_path)


def test_one_layer_with_fewer_experts_is_named(tmp_path):
    source = GGUFFile(GGUF_DIR / "moe-olmoe-F32.gguf")
    short = source.tensor("blk.1.ffn_down_exps.weight")[:7]
    bad = rewrite("moe-olmoe-F32.gguf", tmp_path / "bad.gguf", tensors={"blk.1.ffn_down_exps.weight": short})
    with pytest.raises(ModelLoadError, match=r"'blk\.1\.ffn_down_exps\.weight' has shape \[7, 32, 32\]"):
        _convert(bad, tmp_path)


def test_an_expert_length_that_disagrees_names_the_key(tmp_path):
    bad = rewrite("moe-qwen2moe-F32.gguf", tmp_path / "bad.gguf", keys={"qwen2moe.expert_feed_forward_length": 64})
    with pytest.raises(ModelLoadError, match=r"qwen2moe\.expert_feed_forward_length says 64"):
        _convert(bad, tmp_path)


def test_more_experts_used_than_there_are_is_refused(tmp_path):
    bad = rewrite("moe-mixtral-F32.gguf", tmp_path / "bad.gguf", keys={"llama.expert_used_count": 5})
    with pytest.raises(ModelLoadError, match=r"llama\.expert_used_count = 5"):
        _convert(bad, tmp_path)


@pytest.mark.parametrize("value,what", [(2, "a sigmoid router"), (9, r"an unknown router type \(9\)")])
def test_a_router_other_than_softmax_is_refused_by_its_key(tmp_path, value, what):
    bad = rewrite("moe-qwen3moe-F32.gguf", tmp_path / "bad.gguf", keys={"qwen3moe.expert_gating_func": value})
    with pytest.raises(UnsupportedModelError, match=rf"qwen3moe\.expert_gating_func = {value} asks for {what}"):
        _convert(bad, tmp_path)


def test_a_missing_shared_expert_gate_is_named(tmp_path):
    bad = rewrite("moe-qwen2moe-F32.gguf", tmp_path / "bad.gguf", drop=("blk.1.ffn_gate_inp_shexp.weight",))
    with pytest.raises(ModelLoadError, match=r"no tensor 'blk\.1\.ffn_gate_inp_shexp\.weight'.*sigmoid gate"):
        _convert(bad, tmp_path)


def test_a_missing_expert_count_is_named(tmp_path):
    bad = rewrite("moe-olmoe-F32.gguf", tmp_path / "bad.gguf", keys={"olmoe.expert_count": None})
    with pytest.raises(ModelLoadError, match=r"olmoe\.expert_count"):
        _convert(bad, tmp_path)


def test_a_shared_expert_gate_stored_as_a_vector_runs_as_the_row(tmp_path, monkeypatch):
    """llama-quantize writes Qwen2-MoE's [1, hidden] gate as a [hidden] vector (llama.cpp accepts both)."""
    import tests.gguf.test_graph as graph_tests

    name = "moe-qwen2moe-F32.gguf"
    source = GGUFFile(GGUF_DIR / name)
    gates = {
        f"blk.{i}.ffn_gate_inp_shexp.weight": source.tensor(f"blk.{i}.ffn_gate_inp_shexp.weight")[0] for i in (0, 1)
    }
    rewrite(name, tmp_path / name, tensors=gates)
    assert GGUFFile(tmp_path / name).info("blk.0.ffn_gate_inp_shexp.weight").shape == (32,)
    monkeypatch.setattr(graph_tests, "GGUF_DIR", tmp_path)  # write_folder reads the rewritten file
    folder = write_folder(name, 32, tmp_path / "folder", MODELS[name])
    case = MODELS[name]["cases"][2]
    assert greedy(OnnxTextGenerator.builder().model_path(folder).build(), case) == case["output_ids"]


def test_a_batch_of_prompts_gives_each_row_its_own_ids(generator):
    """The scheduler's batched steps (rows of different lengths in one GroupQueryAttention buffer): each row
    routes its own tokens, so each equals its reference alone."""
    name = "moe-qwen2moe-F32.gguf"
    cases = MODELS[name]["cases"]
    assert batched(generator(name, 32), cases) == [case["output_ids"] for case in cases]


def test_an_int8_kv_cache_runs_on_a_mixture_of_experts_model(tmp_path, monkeypatch):
    """kv_cache('int8') rewrites the experts model's GroupQueryAttention like a dense one's; batched rows
    answer as each alone (the ids themselves differ from the float cache's: int8 keys on tiny random heads)."""
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path))
    folder = gguf_folder(GGUF_DIR / "moe-qwen3moe-Q8_0.gguf")
    gen = OnnxTextGenerator.builder().model_path(folder).kv_cache("int8").build()
    kinds = {i.name: i.type for i in gen.runtime.rest.session.get_inputs() if i.name.startswith("past_key_values.")}
    assert kinds and set(kinds.values()) == {"tensor(int8)"}, kinds
    prompts = [[5, 17, 300, 42, 9], [7, 8, 9]]
    alone = [list(gen.generate(p, max_new_tokens=8, do_sample=False).token_ids) for p in prompts]
    together = [list(r.token_ids) for r in gen.generate_batch(prompts, max_new_tokens=8, do_sample=False)]
    assert together == alone
