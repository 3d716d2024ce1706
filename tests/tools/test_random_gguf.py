"""tools/random_gguf.py writes the tiny shape in each mix: llama.cpp's tensor types, finite modest weights.

The single-type mixes (every matrix in one ggml type) are all converted and run in tests/gguf/test_types.py.

Run as a script (tests never import tools/), as a user would.
"""

from __future__ import annotations

import hashlib
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


def _write(out: Path, mix: str, seed: int = 0) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quiet", "--shape", "tiny", "--mix", mix, "--seed", str(seed), str(out)],
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
