"""gpt-oss GGUF decoders (inference4py.gguf.gptoss): greedy and beam parity with transformers' GptOssForCausalLM.

tools/fixtures/gguf_gptoss.py builds a tiny random gpt-oss checkpoint (two layers, the first on a sliding
window of 6; attention sinks, q/k/v/o biases, gpt-oss's YaRN (base 150000, factor 32 from 4096 positions,
the ramp's ends not rounded); a router with
a bias, top-2 of 4 experts with biases and the clamped SwiGLU, biases drawn so the clamp acts), writes it to
an F32 GGUF with llama.cpp's convert_hf_to_gguf.py, and makes llama-quantize's Q8_0 and MXFP4_MOE copies.
Converted here, each must give transformers' greedy and beam ids (the copies: on their dequantized
weights); each gpt-oss feature is shown to matter; bad files are refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ModelLoadError, UnsupportedModelError  # noqa: E402
from inference4py.gguf import gptoss  # noqa: E402
from inference4py.gguf.graph import write_decoder  # noqa: E402
from inference4py.gguf.hyper import Yarn  # noqa: E402
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

REF = load("gptoss-references.json")
MODELS: dict[str, Any] = REF["models"]
F32 = "gptoss-F32.gguf"
ID = "{type}-{case}"  # one family: the type and the case name

generator = generator_fixture(MODELS)


def test_the_fixtures_are_gpt_oss_with_its_features_and_clear_gaps():
    assert {m["type"] for m in MODELS.values()} == {"F32", "Q8_0", "MXFP4"}
    for name, entry in MODELS.items():
        assert (GGUF_DIR / name).stat().st_size < 600_000
        assert GGUFFile(GGUF_DIR / name).architecture == "gpt-oss"
        assert entry["layer_types"] == ["sliding_attention", "full_attention"] and entry["sliding_window"] == 6
        assert entry["rope_scaling"]["rope_type"] == "yarn" and entry["rope_scaling"]["truncate"] is False
        assert (entry["experts"], entry["experts_per_token"]) == (4, 2)
        assert entry["clamped_fraction"] > 0.01  # the SwiGLU's clamp changes some of the values
        assert (entry["rope_scaling"]["factor"], entry["rope_scaling"]["original_max_position_embeddings"]) == (
            32,
            4096,
        )
        assert max(len(c["prompt_ids"]) for c in entry["cases"]) > entry["sliding_window"]
        for case in entry["cases"]:
            assert case["beam"]["robust_to_noise"], f"{name} {case['name']}"
    f32 = MODELS[F32]
    assert f32["min_logit_gap"] >= REF["min_logit_gap"] and f32["min_route_gap"] >= REF["min_route_gap"]
    for case in f32["cases"]:
        assert case["stable_prefix"] == len(case["output_ids"])
        # llama.cpp reads the file as transformers computes the checkpoint (llama-server, f32 KV, -fa off)
        assert case["llama_cpp_ids"] == case["output_ids"], case["name"]
    kinds = {m["type"]: m["tensor_types"] for m in MODELS.values()}
    assert kinds["MXFP4"]["ffn_gate_exps.weight"] == kinds["MXFP4"]["ffn_down_exps.weight"] == "MXFP4"
    assert kinds["Q8_0"]["ffn_gate_exps.weight"] == kinds["MXFP4"]["attn_q.weight"] == "Q8_0"


@pytest.mark.parametrize("name,case", case_params(MODELS, id_format=ID))
def test_greedy_ids_equal_transformers(generator, name, case):
    """F32, and the Q8_0 and MXFP4 copies against transformers on their dequantized weights."""
    assert greedy(generator(name, 32), case)[: case["stable_prefix"]] == stable(case)


@pytest.mark.parametrize("name,case", case_params(MODELS, id_format=ID))
def test_beam_ids_equal_transformers(generator, name, case):
    assert beam(generator(name, 32), case) == case["beam"]["output_ids"]


@pytest.mark.parametrize("name,case", case_params(MODELS, "F32", id_format=ID))
def test_the_default_width_of_an_f32_file_is_the_float_path(generator, name, case):
    assert greedy(generator(name, None), case) == case["output_ids"]


@pytest.mark.parametrize("name", ["gptoss-Q8_0.gguf", "gptoss-MXFP4.gguf"])
def test_a_quantized_copy_as_it_holds_it_computes_with_its_exact_weights(generator, name, tmp_path, record_property):
    """The default width without the compiled operators: attention, router and head on MatMulNBits with the
    file's blocks, the experts dequantized.  With float32 activations it gives transformers' ids on the
    dequantized file; as converted (8-bit activations) its agreement is recorded."""
    gen = generator(name, None)
    folder = float_activations(generator.folder(name, None), tmp_path / "f")
    exact = OnnxTextGenerator.builder().model_path(folder).build()
    for case in MODELS[name]["cases"]:
        assert greedy(exact, case)[: case["stable_prefix"]] == stable(case), case["name"]
    record_property("steps_before_first_difference_at_level_4", agreement(gen, MODELS[name]["cases"]))


def test_the_graph_has_sinks_biases_and_the_clamped_swiglu(tmp_path):
    config = write_decoder(GGUFFile(GGUF_DIR / F32), tmp_path, 32)
    graph = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False).graph
    attention = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    assert [n.input[11].endswith(".attn.sinks") for n in attention] == [True, True]
    windows = [next(a.i for a in n.attribute if a.name == "local_window_size") for n in attention]
    assert windows == [6, -1]  # even layers slide
    assert (
        len([n for n in graph.node if n.op_type == "Clip"]) == len([n for n in graph.node if n.op_type == "Min"]) == 2
    )
    topk = {n.output[1] for n in graph.node if n.op_type == "TopK"}
    bias_gathers = [n for n in graph.node if n.op_type == "Gather" and "/bias/" in n.name]
    assert len(bias_gathers) == 3 * 2 and {n.input[1] for n in bias_gathers} == topk
    assert config["model_type"] == "gpt_oss" and config["rope_scaling"]["rope_type"] == "yarn"
    assert config["layer_types"] == ["sliding_attention", "full_attention"]


def _differs_without(name: str, tmp_path: Path, **rewritten: Any) -> bool:
    """Whether the long case's greedy ids change on the F32 file as converted now, ``rewritten`` first when
    given (rewrite()'s keys, drop, tensors)."""
    import tests.gguf.test_graph as graph_tests

    tmp_path.mkdir(parents=True, exist_ok=True)
    source = rewrite(F32, tmp_path / F32, **rewritten).parent if rewritten else GGUF_DIR
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_tests, "GGUF_DIR", source)  # write_folder reads the file from there
        folder = write_folder(F32, 32, tmp_path / name, MODELS[F32])
    case = MODELS[F32]["cases"][2]
    return greedy(OnnxTextGenerator.builder().model_path(folder).build(), case) != case["output_ids"]


def test_each_gpt_oss_feature_changes_the_ids(tmp_path, monkeypatch):
    """Without the sinks, the window, YaRN's table factor, YaRN's untruncated ramp or the clamp, the long case
    goes elsewhere: the references check each of them."""
    source = GGUFFile(GGUF_DIR / F32)
    no_sinks = {f"blk.{i}.attn_sinks.weight": np.full(2, -1e30, np.float32) for i in (0, 1)}
    assert _differs_without("sinks", tmp_path / "a", tensors=no_sinks)
    assert _differs_without("window", tmp_path / "b", keys={"gpt-oss.attention.sliding_window": 4096})
    assert source.get(".attention.sliding_window") == 6
    with monkeypatch.context() as mp:
        mp.setattr(Yarn, "attention_factor", property(lambda self: 1.0))
        assert _differs_without("yarn-factor", tmp_path / "c")
    with monkeypatch.context() as mp:
        mp.setattr(gptoss, "LIMIT", 1e9)
        assert _differs_without("clamp", tmp_path / "d")


def test_llama_cpp_s_truncated_yarn_ramp_is_not_transformers():
    """gpt-oss's YaRN ramp is left untruncated (its config's ``truncate: false``); llama.cpp rounds its ends.
    On the fixture the two give different rotary tables; the ids agree on these short cases (llama.cpp's too)."""
    import dataclasses

    from inference4py.gguf.hyper import read_hyper, rope_caches

    hp = read_hyper(GGUFFile(GGUF_DIR / F32))
    assert hp.yarn is not None and hp.yarn.truncate is False
    cos, _ = rope_caches(hp, hp.rope_base, 1.0, None)
    truncated = dataclasses.replace(hp, yarn=dataclasses.replace(hp.yarn, truncate=True))
    cos_t, _ = rope_caches(truncated, hp.rope_base, 1.0, None)
    assert np.abs(cos - cos_t).max() > 1e-3
    assert cos[0, 0] == pytest.approx(0.1 * np.log(32.0) + 1.0)  # the tables carry YaRN's attention factor


@pytest.mark.parametrize("name", list(MODELS))
def test_on_the_compiled_operators_the_experts_are_the_files_blocks_in_place(compiled, name):
    folder, _ = compiled(name)
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    experts = [n for n in graph.node if n.op_type == "GgmlExpertMatMul"]
    assert len(experts) == 3 * 2  # gate, up and down, per layer, no activation inside
    assert all(not [a for a in n.attribute if a.name == "gate"] for n in experts)
    assert not [n for n in graph.node if n.op_type == "Gather" and ".experts." in n.name and "/bias/" not in n.name]
    want = {"F32": 0, "Q8_0": 8, "MXFP4": 39}[MODELS[name]["type"]]  # ggml type ids
    assert {next(a.i for a in n.attribute if a.name == "type") for n in experts} == {want}


@pytest.mark.parametrize("name,case", case_params(MODELS, id_format=ID))
def test_on_the_compiled_operators_greedy_ids_equal_transformers(compiled, name, case):
    """F32 as converted, the Q8_0 and MXFP4 copies with float32 activations (their exact weights)."""
    folder, exact = compiled(name)
    gen = OnnxTextGenerator.builder().model_path(folder if MODELS[name]["type"] == "F32" else exact).build()
    assert greedy(gen, case)[: case["stable_prefix"]] == stable(case)


@pytest.mark.parametrize("name", ["gptoss-Q8_0.gguf", "gptoss-MXFP4.gguf"])
def test_on_the_compiled_operators_llama_cpp_rounding_agreement_is_recorded(compiled, name, record_property):
    folder, _ = compiled(name)
    gen = OnnxTextGenerator.builder().model_path(folder).build()
    record_property("steps_before_first_difference_q8_activations", agreement(gen, MODELS[name]["cases"]))


@pytest.mark.parametrize("name", list(MODELS))
def test_with_llama_cpp_s_rounded_yarn_ramp_the_compiled_operators_give_llama_cpp_s_ids(name, tmp_path, monkeypatch):
    """llama.cpp rounds YaRN's ramp ends (2.02 and 4.35 -> 2 and 5 here); converted with that ramp, the
    compiled operators (activations rounded per block as llama.cpp's) give llama-server's greedy ids on every
    file, the Q8_0 and MXFP4 copies included: the sinks, the clamped SwiGLU, the biases and the MXFP4 experts
    are llama.cpp's arithmetic, and only the ramp (transformers', which the converter keeps) separates them."""
    import dataclasses

    from inference4py.engine.kernels import kernel_library
    from inference4py.gguf import archs
    from inference4py.gguf.convert import gguf_folder

    if not kernel_library().available:
        pytest.skip(f"the compiled ggml operators are not available: {kernel_library().reason}")
    entry = archs.ARCHITECTURES["gpt-oss"]
    monkeypatch.setitem(archs.ARCHITECTURES, "gpt-oss", dataclasses.replace(entry, yarn_truncate=True))
    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path))
    gen = OnnxTextGenerator.builder().model_path(gguf_folder(GGUF_DIR / name)).build()
    for case in MODELS[name]["cases"]:
        assert greedy(gen, case) == case["llama_cpp_ids"], case["name"]


def test_a_batch_of_prompts_gives_each_row_its_own_ids(generator):
    cases = MODELS[F32]["cases"]
    assert batched(generator(F32, 32), cases) == [case["output_ids"] for case in cases]


# ---------------------------------------------------------------------------------- bad files


@pytest.mark.parametrize(
    "tensor",
    ["blk.1.attn_sinks.weight", "blk.0.ffn_gate_inp.bias", "blk.1.ffn_down_exps.bias", "blk.0.attn_output.bias"],
)
def test_a_missing_gpt_oss_tensor_is_named(tmp_path, tensor):
    bad = rewrite(F32, tmp_path / "bad.gguf", drop=(tensor,))
    with pytest.raises(ModelLoadError, match=rf"no tensor '{tensor}'.*gpt-oss layers"):
        write_decoder(GGUFFile(bad), tmp_path, 32)


def test_an_expert_bias_of_the_wrong_shape_is_named(tmp_path):
    bias = GGUFFile(GGUF_DIR / F32).tensor("blk.0.ffn_up_exps.bias")[:, :16]
    bad = rewrite(F32, tmp_path / "bad.gguf", tensors={"blk.0.ffn_up_exps.bias": np.ascontiguousarray(bias)})
    with pytest.raises(ModelLoadError, match=r"'blk\.0\.ffn_up_exps\.bias' has shape \[4, 16\].*\[4, 32\]"):
        write_decoder(GGUFFile(bad), tmp_path, 32)


def test_a_gpt_oss_file_without_experts_is_refused(tmp_path):
    bad = rewrite(
        F32,
        tmp_path / "bad.gguf",
        keys={"gpt-oss.expert_count": None, "gpt-oss.expert_used_count": None},
        drop=("blk.0.ffn_gate_inp.weight", "blk.1.ffn_gate_inp.weight"),
    )
    with pytest.raises(ModelLoadError, match=r"no tensor 'blk\.0\.ffn_gate_inp\.weight'.*gpt-oss layers route"):
        write_decoder(GGUFFile(bad), tmp_path, 32)


@pytest.mark.parametrize(
    "key,value",
    [("attention.sliding_window_pattern", 3), ("attention.sliding_window_pattern", [False, True])],
)
def test_a_window_on_other_layers_is_refused_by_its_key(tmp_path, key, value):
    bad = rewrite(F32, tmp_path / "bad.gguf", keys={f"gpt-oss.{key}": value})
    with pytest.raises(UnsupportedModelError, match=rf"gpt-oss\.{key} = .* other layers"):
        write_decoder(GGUFFile(bad), tmp_path, 32)


def test_llama_cpp_s_default_pattern_written_out_is_accepted(tmp_path):
    good = rewrite(F32, tmp_path / "good.gguf", keys={"gpt-oss.attention.sliding_window_pattern": 2})
    assert write_decoder(GGUFFile(good), tmp_path, 32)["layer_types"] == ["sliding_attention", "full_attention"]


def test_a_rotary_base_of_the_sliding_layers_is_refused_by_its_key(tmp_path):
    bad = rewrite(F32, tmp_path / "bad.gguf", keys={"gpt-oss.rope.freq_base_swa": 10_000.0})
    with pytest.raises(UnsupportedModelError, match=r"gpt-oss\.rope\.freq_base_swa = 10000\.0"):
        write_decoder(GGUFFile(bad), tmp_path, 32)
