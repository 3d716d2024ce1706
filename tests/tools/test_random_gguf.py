"""tools/random_gguf.py writes the tiny shape in each mix: llama.cpp's tensor types, finite modest weights.

The single-type mixes (every matrix in one ggml type) are all converted and run in tests/gguf/test_types.py.
The mixture-of-experts shape ``tiny-moe`` (qwen3moe layout) is checked here: its tensors and types
(llama.cpp's Q4_K_M rule on expert tensors, the router kept F32), its metadata, and that inference4py
converts it and generates.

Run as a script (tests never import tools/), as a user would.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "random_gguf.py"

# tiny: qwen2 layout, 2 layers, tied embeddings, q/k/v biases.  Q4_K_M gives attn_v and ffn_down Q6_K where
# llama.cpp's use_more_bits(i, n) holds (of 2 layers: layer 1 only) and the tied token_embd the output's Q6_K.
Q4_K_M_Q6_K = {"token_embd.weight", "blk.1.attn_v.weight", "blk.1.ffn_down.weight"}
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def _write(out: Path, mix: str, seed: int = 0, shape: str = "tiny") -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quiet", "--shape", shape, "--mix", mix, "--seed", str(seed), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert not out.with_name(out.name + ".partial").exists()


def _expected_type(name: str, mix: str) -> str:
    if not name.endswith(".weight") or name.endswith("norm.weight"):
        return "F32"  # norms and biases
    if mix == "q8_0":
        return "Q8_0"
    if mix == "q4_k_m":
        return "Q6_K" if name in Q4_K_M_Q6_K else "Q4_K"
    return mix  # a single-type mix: every matrix in that ggml type


# single-type mixes: a K-quant with minimums, the non-linear IQ4 table with sub-scales, MXFP4's e8m0 exponent
@pytest.mark.parametrize("mix", ["q8_0", "q4_k_m", "Q2_K", "IQ4_XS", "MXFP4"])
def test_tiny_file_has_the_mix_types_and_finite_weights(tmp_path: Path, mix: str) -> None:
    out = tmp_path / f"tiny-{mix}.gguf"
    _write(out, mix)
    reader = gguf.GGUFReader(str(out))
    tensors = {t.name: t for t in reader.tensors}
    expected_names = {"token_embd.weight", "output_norm.weight"} | {
        f"blk.{i}.{n}"
        for i in range(2)
        for n in (
            "attn_norm.weight",
            "ffn_norm.weight",
            *(f"{m}.weight" for m in MATRICES),
            *(f"attn_{p}.bias" for p in "qkv"),
        )
    }
    assert set(tensors) == expected_names  # tied: no output.weight
    for name, t in tensors.items():
        assert t.tensor_type.name == _expected_type(name, mix), name
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.isfinite(w).all(), name
        if t.tensor_type.name != "F32":
            assert 0.005 < float(w.std()) < 0.05, (name, float(w.std()))
            assert float(np.abs(w).max()) < 1.0, name
            # centred block by block, as trained weights are: the means of 32 weights vary as those of
            # independent ones (std / sqrt(32)), not by a random offset per block (K-quant minimums)
            assert float(w.reshape(-1, 32).mean(axis=1).std()) < 0.35 * float(w.std()), name

    fields = reader.fields
    assert fields["general.architecture"].contents() == "qwen2"
    assert fields["qwen2.block_count"].contents() == 2
    rows = int(tensors["token_embd.weight"].shape[1])  # ggml order: [hidden, vocab]
    tokens = fields["tokenizer.ggml.tokens"].contents()
    assert len(tokens) == rows == 1024
    assert fields["tokenizer.ggml.model"].contents() == "gpt2"
    merges = fields["tokenizer.ggml.merges"].contents()
    seen = set(tokens[:256])
    for merge in merges:  # every merge joins two tokens made before it into the next token
        left, right = merge.split(" ")
        assert left in seen and right in seen, merge
        seen.add(left + right)
    assert seen == set(tokens[: 256 + len(merges)])
    assert tokens[fields["tokenizer.ggml.eos_token_id"].contents()] == "<|im_end|>"


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    _write(first, "q4_k_m")
    _write(second, "q4_k_m")
    _write(other, "q4_k_m", seed=1)

    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    assert digest(first) == digest(second)
    assert digest(first) != digest(other)
    assert first.stat().st_size == other.stat().st_size


# tiny-moe: qwen3moe layout, 2 layers, hidden 256, 4 heads / 2 kv heads of 64, 4 experts of 256 rows, top 2,
# per-head q/k norms, untied output.  Q4_K_M: ffn_down_exps is a ffn_down to llama.cpp (Q6_K where
# use_more_bits(layer, 2): layer 1), attn_v likewise, output.weight Q6_K, the untied token_embd Q4_K; the
# router ffn_gate_inp is never quantized (F32 as llama.cpp's converter writes it).
MOE_Q6_K = {"output.weight", "blk.1.attn_v.weight", "blk.1.ffn_down_exps.weight"}
MOE_EXPERTS, MOE_USED, MOE_FF, MOE_HIDDEN, MOE_HEAD = 4, 2, 256, 256, 64


def _moe_expected(name: str, mix: str) -> tuple[tuple[int, ...], str]:
    """(numpy-order shape, ggml type) of a tiny-moe tensor."""
    e, ff, h = MOE_EXPERTS, MOE_FF, MOE_HIDDEN
    part = name.split(".")[-2]
    shapes = {
        "token_embd": (1024, h),
        "output": (1024, h),
        "attn_q": (4 * MOE_HEAD, h),
        "attn_k": (2 * MOE_HEAD, h),
        "attn_v": (2 * MOE_HEAD, h),
        "attn_output": (h, 4 * MOE_HEAD),
        "attn_q_norm": (MOE_HEAD,),
        "attn_k_norm": (MOE_HEAD,),
        "attn_norm": (h,),
        "ffn_norm": (h,),
        "output_norm": (h,),
        "ffn_gate_inp": (e, h),
        "ffn_gate_exps": (e, ff, h),
        "ffn_up_exps": (e, ff, h),
        "ffn_down_exps": (e, h, ff),
    }
    if name.endswith("norm.weight") or part == "ffn_gate_inp":
        kind = "F32"
    elif mix == "q8_0":
        kind = "Q8_0"
    else:
        kind = "Q6_K" if name in MOE_Q6_K else "Q4_K"
    return shapes[part], kind


@pytest.mark.parametrize("mix", ["q4_k_m", "q8_0"])
def test_tiny_moe_file_has_expert_tensors_in_the_mix_types(tmp_path: Path, mix: str) -> None:
    out = tmp_path / f"tiny-moe-{mix}.gguf"
    _write(out, mix, shape="tiny-moe")
    reader = gguf.GGUFReader(str(out))
    tensors = {t.name: t for t in reader.tensors}
    per_layer = (
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_q_norm",
        "attn_k_norm",
        "attn_output",
        "ffn_norm",
        "ffn_gate_inp",
        "ffn_gate_exps",
        "ffn_up_exps",
        "ffn_down_exps",
    )
    expected = {"token_embd.weight", "output_norm.weight", "output.weight"} | {
        f"blk.{i}.{n}.weight" for i in range(2) for n in per_layer
    }
    assert set(tensors) == expected  # untied, no dense ffn_gate / ffn_up / ffn_down, no biases
    for name, t in tensors.items():
        shape, kind = _moe_expected(name, mix)
        assert tuple(int(d) for d in reversed(t.shape)) == shape, name  # the reader gives ggml order
        assert t.tensor_type.name == kind, name
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.isfinite(w).all(), name
        if kind != "F32" or name.endswith("ffn_gate_inp.weight"):
            assert 0.005 < float(w.std()) < 0.05, (name, float(w.std()))
        if name.endswith("_exps.weight"):  # every expert its own random matrix
            experts = w.reshape(MOE_EXPERTS, -1)
            assert not np.array_equal(experts[0], experts[1]), name

    fields = reader.fields
    assert fields["general.architecture"].contents() == "qwen3moe"
    assert fields["qwen3moe.block_count"].contents() == 2
    assert fields["qwen3moe.expert_count"].contents() == MOE_EXPERTS
    assert fields["qwen3moe.expert_used_count"].contents() == MOE_USED
    assert fields["qwen3moe.expert_feed_forward_length"].contents() == MOE_FF
    assert fields["qwen3moe.rope.dimension_count"].contents() == MOE_HEAD
    assert fields["general.file_type"].contents() == int(
        gguf.LlamaFileType.MOSTLY_Q4_K_M if mix == "q4_k_m" else gguf.LlamaFileType.MOSTLY_Q8_0
    )


def test_the_real_moe_shapes_follow_the_q4_k_m_rule() -> None:
    """``--list``: Q4_K_M's Q6_K tensors are output.weight and attn_v / ffn_down_exps on use_more_bits layers.

    use_more_bits(i, n): i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2.  Of 16 layers (OLMoE-1B-7B): 0, 1, 4, 7,
    10, 13, 14, 15 (8); of 48 (Qwen3-30B-A3B): 0-5, 8, 11, ..., 41, 42-47 (24).  Everything else Q4_K;
    F32: the norms (2 + 2 q/k norms per layer, and output_norm) and the routers (one per layer).
    """
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--list"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    counts = {
        tuple(line.split()[:2]): ast.literal_eval(line.split("MiB of tensors")[1].strip())
        for line in proc.stdout.splitlines()
    }
    # per layer: 4 attention + 3 expert matrices, 1 router, 4 norms; plus token_embd, output, output_norm
    for shape, layers, q6 in (("olmoe-1b-7b", 16, 8), ("qwen3-30b-a3b", 48, 24), ("tiny-moe", 2, 1)):
        matrices, f32 = 7 * layers + 2, 5 * layers + 1
        assert counts[(shape, "q4_k_m")] == {"Q4_K": matrices - (2 * q6 + 1), "Q6_K": 2 * q6 + 1, "F32": f32}, shape
        assert counts[(shape, "q8_0")] == {"Q8_0": matrices, "F32": f32}, shape


def test_tiny_moe_converts_and_generates(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from inference4py import OnnxTextGenerator
    from inference4py.gguf.convert import convert_gguf

    source = tmp_path / "tiny-moe.gguf"
    _write(source, "q4_k_m", shape="tiny-moe")
    folder = convert_gguf(source, tmp_path / "converted")
    config = json.loads((folder / "config.json").read_text())
    assert (config["num_experts"], config["num_experts_per_tok"], config["moe_intermediate_size"]) == (
        MOE_EXPERTS,
        MOE_USED,
        MOE_FF,
    )
    assert config["norm_topk_prob"] is True  # qwen3moe renormalises the chosen experts' weights
    from inference4py.engine.kernels import kernel_library

    if kernel_library().available:  # on the compiled operators: the experts' Q4_K / Q6_K blocks in place
        onnx = pytest.importorskip("onnx")
        graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
        assert len([n for n in graph.node if n.op_type == "GgmlExpertMatMul"]) == 2 * 2  # gate+up, down
    with OnnxTextGenerator.builder().model_path(folder).build() as generator:
        result = generator.generate([823, 629, 441, 514, 266, 496, 379, 247], max_new_tokens=8, do_sample=False)
    ids = [int(t) for t in result.token_ids]
    assert len(ids) == 8 and all(0 <= t < 1024 for t in ids)


def test_the_gpt_oss_20b_shape_is_ggml_org_s_file_layout() -> None:
    """``--list``: gpt-oss-20b in mxfp4_moe is 72 MXFP4 expert tensors (3 of 24 layers), 98 Q8_0 matrices (4
    attention matrices a layer, token_embd, output) and 289 F32 tensors (per layer two norms, four attention
    biases, the sinks, the router and its bias, three expert biases; output_norm): 11,536 MiB, the 12.1 GB of
    ggml-org's gpt-oss-20b GGUF."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--list"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.split()[:2] == ["gpt-oss-20b", "mxfp4_moe"])
    assert ast.literal_eval(line.split("MiB of tensors")[1].strip()) == {"Q8_0": 98, "F32": 289, "MXFP4": 72}
    assert 11_500 < float(line.split()[2]) < 11_600


def test_tiny_gpt_oss_converts_and_generates(tmp_path: Path) -> None:
    """The gpt-oss layout (biases, sinks, post_attention_norm, YaRN, a window) as llama-quantize's MXFP4_MOE
    writes it converts and generates; the harmony <|end|> is not a stop token, <|return|> and <|call|> are."""
    pytest.importorskip("onnxruntime")
    from inference4py import OnnxTextGenerator
    from inference4py.gguf.convert import convert_gguf

    source = tmp_path / "tiny-gpt-oss.gguf"
    _write(source, "mxfp4_moe", shape="tiny-gpt-oss")
    reader = gguf.GGUFReader(str(source))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.1.ffn_down_exps.weight"] == "MXFP4" and types["blk.1.attn_q.weight"] == "Q8_0"
    assert types["blk.1.ffn_down_exps.bias"] == types["blk.0.attn_sinks.weight"] == "F32"
    assert reader.fields["gpt-oss.rope.scaling.factor"].contents() == 32.0
    folder = convert_gguf(source, tmp_path / "converted")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gpt_oss" and config["rope_scaling"]["original_max_position_embeddings"] == 4096
    assert config["layer_types"] == ["sliding_attention", "full_attention"] and config["sliding_window"] == 16
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    # ids 1000 + (real id - 199998): <|return|> (eos), <|endoftext|>, <|call|>; not <|end|> (1009)
    assert eos == [1004, 1001, 1014]
    with OnnxTextGenerator.builder().model_path(folder).build() as generator:
        result = generator.generate([823, 629, 441, 514, 266, 496, 379, 247], max_new_tokens=8, do_sample=False)
    ids = [int(t) for t in result.token_ids]
    assert 0 < len(ids) <= 8 and all(0 <= t < 1024 for t in ids)
