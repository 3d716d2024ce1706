"""DeepSeek-V2 GGUF decoders (inference4py.gguf.mla): latent attention with a latent cache, and its experts.

tools/fixtures/gguf_mla.py builds three tiny random DeepSeek-V2 checkpoints (q_lora_rank 16, none as
V2-Lite has, and q_lora_rank 16 with DeepSeek's YaRN rotary scaling) and a DeepSeek-V3 one (sigmoid router
with a selection bias, 8 experts in 2 groups), three layers each (one dense, two with experts: top-2 of 4, one shared expert, routed
scaling factor 2.5), writes each to an F32 GGUF with llama.cpp's convert_hf_to_gguf.py and records
transformers' greedy and beam ids.  Converted here, they must give those ids; the cache must hold the
latent and the rope key per token, not per-head keys and values; bad files are refused by name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gguf")
onnx = pytest.importorskip("onnx")

from inference4py import OnnxTextGenerator  # noqa: E402
from inference4py.errors import ModelLoadError, UnsupportedModelError  # noqa: E402
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

REF = load("mla-references.json")
MODELS: dict[str, Any] = REF["models"]

generator = generator_fixture(MODELS)


def test_the_fixtures_are_deepseek_v2_with_and_without_q_lora_and_clear_gaps():
    assert {(m["family"], m["type"]): m["q_lora_rank"] for m in MODELS.values()} == {
        (family, kind): rank
        for family, rank in (("deepseek2", 16), ("deepseek2-lite", None), ("deepseek2-yarn", 16), ("deepseek3", 16))
        for kind in ("F32", "Q8_0")
        if (family, kind) != ("deepseek2-lite", "Q8_0")  # llama-quantize refuses it, as llama-server does
    }
    for name, entry in MODELS.items():
        assert (GGUF_DIR / name).stat().st_size < 600_000
        v3 = entry["family"] == "deepseek3"  # 8 experts in 2 groups, a sigmoid router with a selection bias
        assert (entry["first_k_dense_replace"], entry["experts"], entry["experts_per_token"]) == (1, 8 if v3 else 4, 2)
        assert (entry["expert_groups"], entry["expert_groups_used"]) == ((2, 1) if v3 else (None, None))
        assert entry["routed_scaling_factor"] == 2.5 and entry["n_shared_experts"] == 1
        if entry["type"] == "F32":  # the seeds were chosen on these: no near-tie anywhere
            assert entry["min_logit_gap"] >= REF["min_logit_gap"] and entry["min_route_gap"] >= REF["min_route_gap"]
            for case in entry["cases"]:
                assert case["stable_prefix"] == len(case["output_ids"]) and case["beam"]["robust_to_noise"]
    # llama.cpp (llama-server, f32 KV cache, -fa off) reads the q_lora file as transformers computes the
    # checkpoint; it stops at the tokens its vocabulary marks end-of-generation, so its ids may be a prefix
    checked = ("mla-deepseek2-F32.gguf", "mla-deepseek2-yarn-F32.gguf", "mla-deepseek3-F32.gguf")
    for case in (c for name in checked for c in MODELS[name]["cases"]):
        ours = case["llama_cpp_ids"]
        assert len(ours) >= min(20, len(case["output_ids"])) and case["output_ids"][: len(ours)] == ours, case["name"]
    # and refuses a q_lora_rank-less file unless it has V2-Lite's 26 or 27 layers
    assert "q_lora_rank" in MODELS["mla-deepseek2-lite-F32.gguf"]["llama_cpp"]


@pytest.mark.parametrize("bits", [32, None])
@pytest.mark.parametrize("name,case", case_params(MODELS, "F32"))
def test_greedy_ids_equal_transformers(generator, name, case, bits):
    assert greedy(generator(name, bits), case) == case["output_ids"]


@pytest.mark.parametrize("name,case", case_params(MODELS, "Q8_0"))
def test_a_q8_0_file_at_bits_32_gives_transformers_ids_on_its_dequantized_weights(generator, name, case):
    assert greedy(generator(name, 32), case)[: case["stable_prefix"]] == stable(case)


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m["type"] == "Q8_0"])
def test_a_q8_0_file_as_it_holds_it_computes_with_its_exact_weights(generator, name, tmp_path, record_property):
    """The default width: the latent attention's projections, router and head on 8-bit MatMulNBits with the
    file's own blocks, k_b / v_b and the experts dequantized to float32.  With float32 activations it gives
    transformers' ids on the dequantized file; as converted (activations rounded per block, as llama.cpp's q8
    dot products) its agreement is recorded."""
    gen = generator(name, None)
    exact = float_activations(generator.folder(name, None), tmp_path / "f32act")
    exact_gen = OnnxTextGenerator.builder().model_path(exact).build()
    for case in MODELS[name]["cases"]:
        assert greedy(exact_gen, case)[: case["stable_prefix"]] == stable(case), case["name"]
    record_property("steps_before_first_difference_at_level_4", agreement(gen, MODELS[name]["cases"]))


@pytest.mark.parametrize("name,case", case_params(MODELS, "F32", "Q8_0"))
def test_beam_ids_equal_transformers(generator, name, case):
    assert beam(generator(name), case) == case["beam"]["output_ids"]


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m["type"] == "F32"])
def test_a_batch_of_prompts_gives_each_row_its_own_ids(generator, name):
    """The scheduler's batched steps: rows of different lengths, left-padded in one growing cache, each
    masked and positioned on its own, so each equals its reference alone."""
    cases = MODELS[name]["cases"]
    assert batched(generator(name), cases) == [case["output_ids"] for case in cases]


def test_a_prompt_continued_from_the_prefix_cache_gives_the_same_ids(generator):
    """A second request whose prompt is the first's prompt and answer starts from the first's cached
    latents (the growing cache's prefix copy) and continues with the reference."""
    name = "mla-deepseek2-yarn-F32.gguf"
    case = MODELS[name]["cases"][2]
    prompt, want = case["prompt_ids"], case["output_ids"]
    with generator(name).batched(max_concurrent=2, prefix_cache_mb=16) as batched:
        first = batched.generate(prompt, max_new_tokens=len(want), do_sample=False)
        assert list(first.token_ids) == want
        second = batched.generate(prompt + want[:8], max_new_tokens=len(want) - 8, do_sample=False)
        reused = batched.prefix_cache.reused_tokens
    assert reused >= len(prompt)
    assert list(second.token_ids) == want[8:]


def test_speculative_decoding_keeps_accepted_and_discards_rejected_latents(generator):
    """Prompt lookup's drafts are rejected here (the cache rolled back past them), the model drafting for
    itself has its drafts accepted: both give plain greedy ids."""
    from inference4py.generation.speculative import DraftModel, PromptLookup

    name = "mla-deepseek2-F32.gguf"
    gen = generator(name)
    totals = {"rejected": 0, "accepted": 0}
    for case in MODELS[name]["cases"]:
        echo = case["prompt_ids"] + case["output_ids"][:6] + case["prompt_ids"][-6:]  # a lookup finds drafts
        want = greedy(gen, {**case, "prompt_ids": echo})
        lookup = PromptLookup(min_ngram=1, num_draft_tokens=2, max_draft_tokens=6)
        for speculative in (lookup, DraftModel(gen, num_draft_tokens=3, timed=False)):
            result = gen.generate(echo, max_new_tokens=case["max_new_tokens"], do_sample=False, speculative=speculative)
            assert list(result.token_ids) == want, case["name"]
            stats = result.speculative
            assert stats is not None
            totals["rejected"] += stats.drafted_tokens - stats.accepted_tokens
            totals["accepted"] += stats.accepted_tokens
    assert totals["rejected"] > 0 and totals["accepted"] > 0


def test_the_cache_holds_the_latent_and_the_rope_key_per_token(generator):
    """(kv_lora_rank + rope) x layers x 4 bytes a token, against heads x (key + value) x layers x 4 expanded."""
    name = "mla-deepseek2-F32.gguf"
    entry = MODELS[name]
    layers, heads, rank, rope = entry["layers"], entry["heads"], entry["kv_lora_rank"], entry["qk_rope_head_dim"]
    runtime = generator(name).runtime
    layout = runtime.layout
    assert [(e.input, e.shape[1], e.shape[3]) for e in layout.self_entries] == [
        (f"past_key_values.{i}.{kind}", 1, size)
        for i in range(layers)
        for kind, size in (("key", rank), ("value", rope))
    ]
    assert not runtime.shared_kv  # no GroupQueryAttention: the growing cache, position_ids fed per row
    latent_bytes = (rank + rope) * layers * 4
    expanded = heads * ((entry["qk_nope_head_dim"] + rope) + entry["v_head_dim"]) * layers * 4
    assert layout.position_bytes == latent_bytes == 288 and expanded == 960
    state = runtime.new_state(1, capacity=32)
    case = entry["cases"][0]
    state.prefill(np.array([case["prompt_ids"]]))
    state.step(case["output_ids"][0])
    tokens = len(case["prompt_ids"]) + 1
    cache = state._past
    assert cache is not None
    assert [tuple(v.shape()) for v in cache] == [(1, 1, tokens, size) for _ in range(layers) for size in (rank, rope)]
    assert sum(int(np.prod(v.shape())) for v in cache) * 4 == latent_bytes * tokens


def test_the_up_projections_are_absorbed_and_no_head_keys_are_made(tmp_path):
    """The query meets the latent through k_b, the latents' weighted sum goes through v_b: no [heads, nope]
    key or [heads, v] value is computed from the cache."""
    config = write_decoder(GGUFFile(GGUF_DIR / "mla-deepseek2-F32.gguf"), tmp_path, 32)
    graph = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False).graph
    absorbed = [n for n in graph.node if n.op_type == "MatMul" and "/k_b/" in n.name]
    after = [n for n in graph.node if n.op_type == "MatMul" and "/v_b/" in n.name]
    assert len(absorbed) == len(after) == 3
    assert not any(n.op_type == "GroupQueryAttention" for n in graph.node)
    # every head's query meets the cached latents in one product, read as stored (transB, no Transpose)
    scores = [n for n in graph.node if n.op_type == "FusedMatMul" and "scores_latent" in n.name]
    assert len(scores) == 3
    assert all(n.input[1].startswith("present.") and n.input[1].endswith(".key") for n in scores)
    assert all(next(a.i for a in n.attribute if a.name == "transB") == 1 for n in scores)
    assert not any(n.op_type == "Transpose" and "/latent/" in n.name for n in graph.node)
    assert (config["kv_lora_rank"], config["qk_rope_head_dim"], config["routed_scaling_factor"]) == (16, 8, 2.5)
    assert config["first_k_dense_replace"] == 1 and config["model_type"] == "deepseek_v2"


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m["type"] == "F32"])
def test_the_expanded_form_caches_every_heads_keys_and_gives_the_same_ids(generator, name, tmp_path):
    """The form the absorbed one is measured against (benchmarks/decode_depth.py --expanded): k_b / v_b
    applied to the latent, per-head keys [heads, nope + rope] and values [heads, v] cached; the same logits
    to float32 summation and the same greedy ids."""
    import shutil

    entry = MODELS[name]
    absorbed = generator(name)
    folder = write_folder(name, 32, tmp_path / "folder", entry)
    (tmp_path / "graph").mkdir()
    write_decoder(GGUFFile(GGUF_DIR / name), tmp_path / "graph", 32, expanded_mla=True)
    for file in ("model.onnx", "model.onnx.data"):
        shutil.copy(tmp_path / "graph" / file, folder / file)
    expanded = OnnxTextGenerator.builder().model_path(folder).build()
    heads, rope = entry["heads"], entry["qk_rope_head_dim"]
    key, value = entry["qk_nope_head_dim"] + rope, entry["v_head_dim"]
    assert [(e.shape[1], e.shape[3]) for e in expanded.runtime.layout.self_entries] == [
        (heads, key),
        (heads, value),
    ] * entry["layers"]
    for case in entry["cases"]:
        prompt = np.array([case["prompt_ids"]])
        states = [g.runtime.new_state(1, capacity=64) for g in (absorbed, expanded)]
        logits = [np.asarray(state.prefill(prompt))[0, -1] for state in states]
        np.testing.assert_allclose(logits[1], logits[0], rtol=1e-4, atol=1e-4)
        token = int(logits[0].argmax())
        stepped = [np.asarray(state.step(token))[0, -1] for state in states]
        np.testing.assert_allclose(stepped[1], stepped[0], rtol=1e-4, atol=1e-4)
        assert greedy(expanded, case) == greedy(absorbed, case) == case["output_ids"], case["name"]


def test_an_older_file_with_attn_kv_b_gives_the_same_ids(generator, tmp_path, monkeypatch):
    """Files converted before llama.cpp split kv_b_proj hold attn_kv_b [heads x (nope + v), rank]."""
    import tests.gguf.test_graph as graph_tests

    name = "mla-deepseek2-lite-F32.gguf"
    entry, source = MODELS[name], GGUFFile(GGUF_DIR / name)
    heads, rank = entry["heads"], entry["kv_lora_rank"]
    joined = {}
    for i in range(entry["layers"]):
        k_b = source.tensor(f"blk.{i}.attn_k_b.weight").transpose(0, 2, 1)  # [heads, nope, rank]
        v_b = source.tensor(f"blk.{i}.attn_v_b.weight")  # [heads, v, rank]
        joined[f"blk.{i}.attn_kv_b.weight"] = np.concatenate([k_b, v_b], axis=1).reshape(-1, rank)
    drop = tuple(f"blk.{i}.attn_{w}_b.weight" for i in range(entry["layers"]) for w in "kv")
    rewrite(name, tmp_path / name, drop=drop, tensors={k: v.astype(np.float32) for k, v in joined.items()})
    assert GGUFFile(tmp_path / name).info("blk.0.attn_kv_b.weight").shape == (heads * 32, rank)
    monkeypatch.setattr(graph_tests, "GGUF_DIR", tmp_path)
    folder = write_folder(name, 32, tmp_path / "folder", entry)
    gen = OnnxTextGenerator.builder().model_path(folder).build()
    for case in entry["cases"]:
        assert greedy(gen, case) == case["output_ids"], case["name"]


def test_yarn_scales_the_frequencies_and_the_attention_logits(generator, tmp_path, monkeypatch):
    """The YaRN fixture's ids need both YaRN's blended frequencies and DeepSeek's mscale^2 on the logits
    (transformers' class with DeepSeek's softmax scale, and llama.cpp, agree on them): without the scale
    the long case goes elsewhere."""
    from inference4py.gguf.mla import Yarn

    name = "mla-deepseek2-yarn-F32.gguf"
    entry = MODELS[name]
    assert entry["rope_scaling"]["factor"] == 4.0 and entry["rope_scaling"]["original_max_position_embeddings"] == 16
    (tmp_path / "graph").mkdir()
    config = write_decoder(GGUFFile(GGUF_DIR / name), tmp_path / "graph", 32)
    assert config["rope_scaling"]["rope_type"] == "yarn" and config["rope_scaling"]["mscale_all_dim"] == pytest.approx(
        0.707
    )
    monkeypatch.setattr(Yarn, "mscale", property(lambda self: 1.0))
    folder = write_folder(name, 32, tmp_path / "unscaled", entry)
    case = entry["cases"][2]
    assert greedy(OnnxTextGenerator.builder().model_path(folder).build(), case) != case["output_ids"]


@pytest.mark.parametrize("name,case", case_params(MODELS, "F32", "Q8_0"))
def test_on_the_compiled_operators_greedy_ids_equal_transformers(compiled, name, case):
    """The default conversion (gguf_folder): the latent attention's products on GgmlMatMul, the experts on
    GgmlExpertMatMul, the file's bytes in place.  F32 files as converted, Q8_0 files with float32 activations
    (their exact weights).  The folder stops at the file's end-of-generation tokens (as llama.cpp does), which
    may end a case before transformers' reference, whose checkpoint has one eos."""
    folder, exact = compiled(name)
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    products = [n for n in graph.node if n.op_type == "GgmlExpertMatMul"]
    per_head = [n for n in products if "/k_b/" in n.name or "/v_b/" in n.name]
    assert len(products) - len(per_head) == 2 * 2  # the experts: gate+up and down, 2 layers
    # the fixtures' k_b / v_b rows (16 wide) are not a block's multiple: llama-quantize keeps them float32,
    # and so are they here (test_quantized_up_projections_are_read_in_place covers quantized ones)
    assert not per_head
    gen = OnnxTextGenerator.builder().model_path(folder if MODELS[name]["type"] == "F32" else exact).build()
    got, want = greedy(gen, case), stable(case)
    assert got[: len(want)] == want[: len(got)]
    ends = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert len(got) >= len(want) or got[-1] in (ends if isinstance(ends, list) else [ends])


def test_quantized_up_projections_are_read_in_place(tmp_path):
    """A file whose attn_k_b / attn_v_b are quantized (tools/random_gguf.py's tiny-mla shape in llama.cpp's
    Q4_K_M rule: Q5_0, their rows being 64 and 128 wide) has them read in place, each head an "expert" of
    GgmlExpertMatMul, with no float32 copy in the folder; with float32 activations it computes the float32
    conversion's logits (the same weights, dequantized)."""
    import subprocess
    import sys

    from inference4py.engine.kernels import kernel_library
    from inference4py.engine.sessions import create_session
    from inference4py.gguf.convert import convert_gguf

    if not kernel_library().available:
        pytest.skip("the compiled operators are not built here")
    path = tmp_path / "tiny-mla.gguf"
    script = Path(__file__).resolve().parents[2] / "tools" / "random_gguf.py"
    subprocess.run(
        [sys.executable, str(script), "--shape", "tiny-mla", "--mix", "q4_k_m", "--quiet", str(path)], check=True
    )
    types = {t.name: t.type for t in GGUFFile(path).tensors()}
    assert {types[f"blk.{i}.attn_{w}_b.weight"] for i in (0, 1) for w in ("k", "v")} == {"Q5_0"}
    folder = convert_gguf(path, tmp_path / "file", bits=None)
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    per_head = [n for n in graph.graph.node if n.op_type == "GgmlExpertMatMul" and "_b/" in n.name]
    assert len(per_head) == 2 * 2
    held = {i.name: i.data_type for i in graph.graph.initializer if "_b.weight" in i.name}
    assert held and set(held.values()) == {onnx.TensorProto.UINT8}, held  # the file's bytes, no float32 copy
    for node in graph.graph.node:
        if node.domain == "ai.inference4py" and node.op_type != "GgmlGather":
            node.attribute.append(onnx.helper.make_attribute("float_activations", 1))
    (folder / "model.onnx").write_bytes(graph.SerializeToString())
    reference = convert_gguf(path, tmp_path / "f32", bits=32)

    def logits(folder: Path) -> np.ndarray:
        session = create_session(folder / "model.onnx")
        ids = np.array([[5, 17, 300, 42, 9, 611, 23, 77]], np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None],
        }
        for i in session.get_inputs():
            if i.name.startswith("past_key_values."):
                feeds[i.name] = np.zeros((1, 1, 0, i.shape[3]), np.float32)
            elif i.name == "num_logits_to_keep":
                feeds[i.name] = np.array(0, np.int64)
        return session.run(["logits"], feeds)[0][0]

    got, want = logits(folder), logits(reference)
    assert np.abs(got - want).max() < 1e-4 * max(1.0, float(np.abs(want).max()))


def test_a_dense_deepseek2_file_runs_on_the_compiled_operators(tmp_path):
    """Without experts (dense deepseek2 models exist), the file's matrices are used in place by the compiled
    operators around the latent attention, with the float path's ids."""
    from inference4py.engine.kernels import kernel_library
    from inference4py.gguf.convert import convert_gguf

    if not kernel_library().available:
        pytest.skip("the compiled operators are not built here")
    name = "mla-deepseek2-F32.gguf"
    src = GGUFFile(GGUF_DIR / name)
    drop = tuple(t.name for t in src.tensors() if "exps" in t.name or "shexp" in t.name or "gate_inp" in t.name)
    dense_ffn = {
        f"blk.{i}.ffn_{w}.weight": src.tensor(f"blk.0.ffn_{w}.weight") for i in (1, 2) for w in ("gate", "up", "down")
    }
    keys: dict[str, Any] = {k: None for k in src.metadata if ".expert_" in k}
    dense = rewrite(
        name,
        tmp_path / "dense.gguf",
        keys=keys | {"deepseek2.leading_dense_block_count": 3},
        drop=drop,
        tensors=dense_ffn,
    )
    prompt = MODELS[name]["cases"][2]["prompt_ids"]
    ids = []
    for bits in (None, 32):
        folder = convert_gguf(dense, tmp_path / f"out-{bits}", bits=bits)
        graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
        assert any(n.domain == "ai.inference4py" for n in graph.node) == (bits is None)
        gen = OnnxTextGenerator.builder().model_path(folder).build()
        ids.append(list(gen.generate(prompt, max_new_tokens=8, do_sample=False).token_ids))
    assert ids[0] == ids[1]


# ---------------------------------------------------------------------------------- bad files


def _convert(path: Path, tmp_path: Path) -> None:
    write_decoder(GGUFFile(path), tmp_path / "out", 32)


def test_a_missing_kv_lora_rank_is_named(tmp_path):
    bad = rewrite("mla-deepseek2-F32.gguf", tmp_path / "bad.gguf", keys={"deepseek2.attention.kv_lora_rank": None})
    with pytest.raises(ModelLoadError, match=r"deepseek2\.attention\.kv_lora_rank"):
        _convert(bad, tmp_path)


@pytest.mark.parametrize(
    "tensor",
    ["blk.2.attn_kv_a_mqa.weight", "blk.1.attn_kv_a_norm.weight", "blk.0.attn_k_b.weight", "blk.2.attn_v_b.weight"],
)
def test_a_missing_latent_tensor_is_named(tmp_path, tensor):
    bad = rewrite("mla-deepseek2-F32.gguf", tmp_path / "bad.gguf", drop=(tensor,))
    with pytest.raises(ModelLoadError, match=f"no tensor {re.escape(repr(tensor))}.*latent attention"):
        _convert(bad, tmp_path)


def test_a_kv_lora_rank_that_disagrees_with_the_tensors_names_both(tmp_path):
    bad = rewrite("mla-deepseek2-F32.gguf", tmp_path / "bad.gguf", keys={"deepseek2.attention.kv_lora_rank": 12})
    with pytest.raises(
        ModelLoadError, match=r"'blk\.0\.attn_kv_a_mqa\.weight' has shape \[24, 32\].*kv_lora_rank = 12"
    ):
        _convert(bad, tmp_path)


def test_a_missing_q_projection_names_the_q_lora_key(tmp_path):
    bad = rewrite("mla-deepseek2-lite-F32.gguf", tmp_path / "bad.gguf", drop=("blk.1.attn_q.weight",))
    with pytest.raises(
        ModelLoadError, match=r"no tensor 'blk\.1\.attn_q\.weight'.*no deepseek2\.attention\.q_lora_rank"
    ):
        _convert(bad, tmp_path)


def test_the_v3_router_chooses_by_score_and_bias_among_the_best_group(tmp_path):
    config = write_decoder(GGUFFile(GGUF_DIR / "mla-deepseek3-F32.gguf"), tmp_path, 32)
    graph = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False).graph
    ops = {n.name.rsplit("/", 1)[-1]: n.op_type for n in graph.node if "/model.layers.1.mlp/router/" in n.name}
    assert {ops["Sigmoid"], ops["bias"], ops["Where"], ops["weights"]} == {"Sigmoid", "Add", "Where", "GatherElements"}
    assert config["num_experts"] == 8 and config["norm_topk_prob"] is True


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"deepseek2.expert_group_count": 3}, r"expert_group_count = 3 and deepseek2\.expert_group_used_count = 1"),
        ({"deepseek2.expert_gating_func": 4}, r"expert_gating_func = 4 asks for a sqrt-softplus router"),
    ],
)
def test_a_v3_router_the_converter_cannot_build_is_refused_by_its_key(tmp_path, keys, message):
    bad = rewrite("mla-deepseek3-F32.gguf", tmp_path / "bad.gguf", keys=keys)
    with pytest.raises((ModelLoadError, UnsupportedModelError), match=message):
        _convert(bad, tmp_path)


def test_a_missing_shared_expert_names_the_count(tmp_path):
    bad = rewrite("mla-deepseek2-F32.gguf", tmp_path / "bad.gguf", drop=("blk.1.ffn_up_shexp.weight",))
    with pytest.raises(ModelLoadError, match=r"no tensor 'blk\.1\.ffn_up_shexp\.weight'.*expert_shared_count = 1"):
        _convert(bad, tmp_path)


def test_yarn_without_its_log_multiplier_is_refused_by_the_key(tmp_path):
    bad = rewrite(
        "mla-deepseek2-yarn-F32.gguf", tmp_path / "bad.gguf", keys={"deepseek2.rope.scaling.yarn_log_multiplier": None}
    )
    with pytest.raises(UnsupportedModelError, match=r"deepseek2\.rope\.scaling\.yarn_log_multiplier"):
        _convert(bad, tmp_path)


def test_int8_kv_is_refused_with_the_reason_for_latent_attention(tmp_path, monkeypatch):
    """The latent cache is not per-head keys and values: kv_cache('int8') names why it does not apply."""
    from inference4py.errors import ConfigurationError
    from inference4py.gguf.convert import gguf_folder

    monkeypatch.setenv("INFERENCE4PY_CACHE", str(tmp_path))
    folder = gguf_folder(GGUF_DIR / "mla-deepseek2-F32.gguf")
    with pytest.raises(ConfigurationError, match="does not apply .* multi-head latent attention"):
        OnnxTextGenerator.builder().model_path(folder).kv_cache("int8").build()
