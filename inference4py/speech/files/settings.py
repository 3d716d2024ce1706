"""The JSON files of a converted Whisper folder: config.json, generation_config.json, preprocessor_config.json.

Whisper's special tokens are found by their text in the tokenizer (so every vocabulary layout,
large-v3's extra language included, gets its own ids); the suppress lists, alignment heads and
languages come from what the model file carries (CTranslate2's config.json holds the Hub's
generation config values), with OpenAI's rules where a file carries nothing:

* multilingual: a vocabulary of 51,865 tokens or more, as OpenAI's ``is_multilingual`` (51,864 is
  English-only); a vocabulary of another size (a test model) is multilingual when it has language
  tokens and the file lists languages;
* alignment heads: the heads of the second half of the decoder layers (transformers' default);
* begin-suppress: the space token and ``<|endoftext|>``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from inference4py.errors import UnsupportedModelError
from inference4py.speech.files.weights import Dims

__all__ = ["model_config", "generation_config", "preprocessor_config", "special_ids"]

_log = logging.getLogger("inference4py.whisper")

MULTILINGUAL_VOCAB = 51865  # OpenAI: n_vocab >= 51865 is multilingual (51864: the .en models)
MAX_INITIAL_TIMESTAMP_INDEX = 50  # OpenAI's max_initial_timestamp = 1.0 s, as in every Hub generation config
_LANGUAGE = re.compile(r"<\|[a-z]{2,3}\|>")  # en ... haw, yue
_SPECIAL = {
    "eot": ("<|endoftext|>",),
    "sot": ("<|startoftranscript|>",),
    "translate": ("<|translate|>",),
    "transcribe": ("<|transcribe|>",),
    "startoflm": ("<|startoflm|>",),
    "startofprev": ("<|startofprev|>",),
    "nospeech": ("<|nocaptions|>", "<|nospeech|>"),
    "notimestamps": ("<|notimestamps|>",),
    "timestamp_begin": ("<|0.00|>",),
}


def special_ids(tokens: Mapping[str, int], where: str) -> dict[str, int]:
    """Whisper's special token ids by their text (``tokens``: token text -> id).

    Raises:
        UnsupportedModelError: a special token is missing (not a Whisper vocabulary).
    """
    ids: dict[str, int] = {}
    for key, names in _SPECIAL.items():
        found = next((tokens[n] for n in names if n in tokens), None)
        if found is None and key == "timestamp_begin" and "notimestamps" in ids:
            found = ids["notimestamps"] + 1  # older tokenizer files stop before the timestamps (OpenAI's rule)
        if found is None:
            raise UnsupportedModelError(
                f"{where}: the vocabulary has no {names[0]} token: it is not a Whisper tokenizer. Use the "
                "tokenizer.json that came with the model."
            )
        ids[key] = int(found)
    return ids


def languages(tokens: Mapping[str, int], ids: Mapping[str, int]) -> dict[str, int]:
    """The language tokens (between ``<|startoftranscript|>`` and ``<|translate|>``), text -> id."""
    return {
        t: i
        for t, i in sorted(tokens.items(), key=lambda kv: kv[1])
        if ids["sot"] < i < ids["translate"] and _LANGUAGE.fullmatch(t)
    }


def is_multilingual(vocab_size: int, langs: Mapping[str, int], listed: Sequence[int]) -> bool:
    """OpenAI's rule by vocabulary size; for other sizes, whether the file lists languages the vocabulary has."""
    if vocab_size >= MULTILINGUAL_VOCAB - 1:
        return vocab_size >= MULTILINGUAL_VOCAB
    return bool(langs) and bool(set(listed) & set(langs.values()))


def generation_config(
    dims: Dims, tokens: Mapping[str, int], carried: Mapping[str, Any], *, where: str
) -> dict[str, Any]:
    """generation_config.json in the Hub's shape for openai/whisper-* (or *.en).

    Args:
        dims: the model's shape.
        tokens: the tokenizer's token text -> id.
        carried: what the file carries, with CTranslate2's config.json names (``alignment_heads``,
            ``suppress_ids``, ``suppress_ids_begin``, ``lang_ids``); missing keys take OpenAI's rules.
        where: the file, for messages.
    """
    ids = special_ids(tokens, where)
    langs = languages(tokens, ids)
    listed = [int(i) for i in carried.get("lang_ids") or ()]
    multilingual = is_multilingual(dims.vocab_size, langs, listed)
    heads = carried.get("alignment_heads")
    if not heads:
        half = dims.decoder_layers // 2
        heads = [[layer, head] for layer in range(half, dims.decoder_layers) for head in range(dims.decoder_heads)]
    begin = carried.get("suppress_ids_begin")
    if begin is None:
        begin = [i for i in (tokens.get("Ġ"), ids["eot"]) if i is not None]
    suppress = carried.get("suppress_ids")
    if suppress is None:
        _log.warning(
            "%s carries no suppress list: symbols are not suppressed (OpenAI's list needs the Hub's config)", where
        )
        suppress = []
    gen: dict[str, Any] = {
        "alignment_heads": [[int(a), int(b)] for a, b in heads],
        "begin_suppress_tokens": [int(t) for t in begin],
        "bos_token_id": ids["eot"] if multilingual else ids["sot"],  # as the Hub's configs have it
        "decoder_start_token_id": ids["sot"],
        "eos_token_id": ids["eot"],
        "forced_decoder_ids": [[1, None], [2, ids["transcribe"]]] if multilingual else [[1, ids["notimestamps"]]],
        "is_multilingual": multilingual,
        "max_initial_timestamp_index": MAX_INITIAL_TIMESTAMP_INDEX,
        "max_length": dims.target_positions,
        "no_timestamps_token_id": ids["notimestamps"],
        "pad_token_id": ids["eot"],
        "prev_sot_token_id": ids["startofprev"],
        "return_timestamps": False,
        "suppress_tokens": [int(t) for t in suppress],
    }
    if multilingual:
        gen["lang_to_id"] = langs
        gen["task_to_id"] = {"transcribe": ids["transcribe"], "translate": ids["translate"]}
    return gen


def model_config(dims: Dims, generation: Mapping[str, Any], *, tied: bool) -> dict[str, Any]:
    """config.json in transformers' WhisperConfig shape."""
    return {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "is_encoder_decoder": True,
        **dims.config(),
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "bos_token_id": generation["bos_token_id"],
        "eos_token_id": generation["eos_token_id"],
        "pad_token_id": generation["pad_token_id"],
        "decoder_start_token_id": generation["decoder_start_token_id"],
        "begin_suppress_tokens": generation["begin_suppress_tokens"],
        "median_filter_width": 7,
    }


def preprocessor_config(dims: Dims) -> dict[str, Any]:
    """preprocessor_config.json: Whisper's log-mel settings with the model's mel bins."""
    frames = 2 * dims.source_positions
    return {
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": dims.n_mels,
        "sampling_rate": 16000,
        "hop_length": 160,
        "n_fft": 400,
        "chunk_length": frames * 160 // 16000,
        "n_samples": frames * 160,
        "nb_max_frames": frames,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": False,
    }
