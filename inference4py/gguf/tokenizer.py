"""The tokenizer of a GGUF file as Hugging Face ``tokenizers`` files (no transformers at run time).

llama.cpp keeps a model's vocabulary in ``tokenizer.ggml.*`` metadata; :func:`tokenizer_files`
turns it into ``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json`` that
tokenize the way the model's own Hugging Face tokenizer (and llama.cpp) does:

- ``tokenizer.ggml.model == "gpt2"``: byte-level BPE over ``merges``; ``tokenizer.ggml.pre`` names
  the pre-tokenizer flavour (the split regexes llama.cpp's ``llama-vocab.cpp`` lists per name,
  written as the original ``tokenizer.json`` files write them);
- ``tokenizer.ggml.model == "llama"``: a sentencepiece BPE vocabulary with ``scores``; merges are
  rebuilt from the scores (a pair merges into the piece with the highest score first, as
  sentencepiece does), with byte fallback, and ``add_space_prefix`` chooses between Llama's
  ``"▁"`` prefix and Gemma's none.

Token types (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte) become added tokens
the way llama.cpp splits them out of the text: control and unknown tokens are special (skipped when
decoding with ``skip_special_tokens``), user-defined tokens are plain added tokens.

Where transformers' own GGUF conversion differs, this module follows llama.cpp and the model's
original tokenizer (transformers ignores ``tokenizer.ggml.pre`` and ``add_bos_token``, so a
SmolLM2 file gets a BOS and no digit splitting; it turns Gemma's BPE scores into a Unigram model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inference4py.errors import ModelLoadError, UnsupportedModelError

__all__ = ["tokenizer_files", "generation_defaults", "SUPPORTED_MODELS", "SUPPORTED_PRE"]

SUPPORTED_MODELS = ("gpt2", "llama")

# llama.cpp's token types (llama_token_type; sentencepiece's piece types use the same numbers)
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

# Token texts llama.cpp treats as end of generation besides eos/eot/eom (llama-vocab.cpp's list)
_EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|return|>",
        "<|call|>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "<｜end▁of▁sentence｜>",
        "<|end_of_text|>",
    }
)

# --------------------------------------------------------------------------- gpt2-BPE pre-tokenizers

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SEED_CODER = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"
_DEEPSEEK_LETTERS = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1F7D}ᾀ-ᾴᾶ-ᾼ\x{1FBE}ῂ-ῄῆ-ῌῐ-\x{1FD3}ῖ-\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ\x{10400}-\x{1044f}𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
_CJK = r"[一-龥ࠀ-一가-퟿]+"


@dataclass(frozen=True)
class _Pre:
    """One ``tokenizer.ggml.pre`` flavour of byte-level BPE.

    ``splits`` run one after another, each splitting the previous pieces (matches and the gaps
    between them are both kept, as llama.cpp's ``unicode_regex_split`` and tokenizers' ``Split``
    with ``Isolated`` do); ``gpt2_split`` runs GPT-2's own regex last (``ByteLevel(use_regex)``).
    ``add_bos`` and ``clean_spaces`` are llama.cpp's defaults when the file does not say.
    """

    splits: tuple[str, ...] = ()
    gpt2_split: bool = False
    nfc: bool = False
    ignore_merges: bool = False
    add_bos: bool = False
    clean_spaces: bool = True


_GPT2_PRE = _Pre(gpt2_split=True)
_DIGITS_PRE = _Pre(splits=(r"\p{N}",), gpt2_split=True)
_LLAMA3_PRE = _Pre(splits=(_LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_PRE = _Pre(splits=(_QWEN2,), clean_spaces=False)
_DEFAULT_PRE = _Pre(splits=(r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_DEEPSEEK_LLM = _Pre(
    splits=(r"[\r\n]", _DEEPSEEK_LETTERS, r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", _CJK, r"\p{N}+"),
    clean_spaces=False,
)

_PRE: dict[str, _Pre] = {
    "default": _DEFAULT_PRE,
    **dict.fromkeys(
        ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum"),
        _GPT2_PRE,
    ),
    **dict.fromkeys(("mpt", "olmo", "jais", "exaone4"), _GPT2_PRE),
    **dict.fromkeys(("trillion", "granite-docling"), _Pre(gpt2_split=True, clean_spaces=False)),
    **dict.fromkeys(("starcoder", "refact", "codeshell", "exaone", "minerva-7b"), _DIGITS_PRE),
    **dict.fromkeys(("smollm", "command-r"), _Pre(splits=(r"\p{N}",), gpt2_split=True, clean_spaces=False)),
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"), _LLAMA3_PRE
    ),
    **dict.fromkeys(("dbrx", "smaug-bpe", "glm4", "chatglm-bpe"), _Pre(splits=(_LLAMA3,))),
    "qwen2": _Pre(splits=(_QWEN2,), nfc=True, clean_spaces=False),  # Qwen's tokenizer.json normalizes NFC
    **dict.fromkeys(("deepseek-r1-qwen", "kormo", "hunyuan", "grok-2"), _QWEN2_PRE),
    **dict.fromkeys(("stablelm2", "megrez"), _Pre(splits=(_QWEN2,))),
    "deepseek-llm": _DEEPSEEK_LLM,
    "deepseek-coder": _Pre(
        splits=(r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"),
        clean_spaces=False,
    ),
    # falcon's digit-triplet split comes after GPT-2's regex, as llama.cpp orders it
    "falcon": _Pre(splits=(r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    **dict.fromkeys(("bloom", "gpt3-finnish"), _Pre(splits=(_BLOOM,))),
    "poro-chat": _Pre(splits=(_BLOOM,), clean_spaces=False),
    "viking": _Pre(splits=(_BLOOM, r"\p{N}"), clean_spaces=False),
    "tekken": _Pre(splits=(_TEKKEN,), ignore_merges=True, add_bos=True, clean_spaces=False),
    **dict.fromkeys(("gpt-4o", "llama4", "minimax-m2"), _Pre(splits=(_GPT4O,), clean_spaces=False)),
    "seed-coder": _Pre(splits=(_SEED_CODER,), clean_spaces=False),
}
SUPPORTED_PRE = tuple(sorted(_PRE))


# --------------------------------------------------------------------------- metadata access


class _Vocab:
    """The ``tokenizer.ggml.*`` fields of one file, checked."""

    def __init__(self, metadata: Mapping[str, Any]) -> None:
        self.meta = metadata
        model = metadata.get("tokenizer.ggml.model")
        if model not in SUPPORTED_MODELS:
            raise UnsupportedModelError(
                f"The GGUF tokenizer model {model!r} (tokenizer.ggml.model) is not supported. Supported: "
                f"{', '.join(SUPPORTED_MODELS)} (byte-level BPE and sentencepiece-style vocabularies)."
            )
        self.model: str = model
        tokens = metadata.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, list) or not tokens:
            raise ModelLoadError("The GGUF file has no tokenizer.ggml.tokens: it carries no vocabulary.")
        self.tokens: list[str] = [str(t) for t in tokens]
        types = metadata.get("tokenizer.ggml.token_type")
        if types is None:
            types = [_NORMAL] * len(self.tokens)
        if len(types) != len(self.tokens):
            raise ModelLoadError(
                f"tokenizer.ggml.token_type has {len(types)} entries for {len(self.tokens)} tokens: "
                "the file is damaged. Download or convert it again."
            )
        self.types: list[int] = [int(t) for t in types]

    def get(self, key: str, default: Any = None) -> Any:
        return self.meta.get("tokenizer.ggml." + key, default)

    def token_id(self, key: str) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        value = int(value)
        return value if 0 <= value < len(self.tokens) else None

    def token(self, key: str) -> str | None:
        i = self.token_id(key)
        return None if i is None else self.tokens[i]

    @property
    def pre(self) -> _Pre:
        name = self.get("pre") or "default"
        pre = _PRE.get(str(name))
        if pre is None:
            raise UnsupportedModelError(
                f"The GGUF pre-tokenizer {name!r} (tokenizer.ggml.pre) is not supported. Supported: "
                f"{', '.join(SUPPORTED_PRE)}."
            )
        return pre

    def add_bos(self) -> bool:
        default = self.pre.add_bos if self.model == "gpt2" else True
        return bool(self.get("add_bos_token", default)) and self.token_id("bos_token_id") is not None

    def add_eos(self) -> bool:
        return bool(self.get("add_eos_token", False)) and self.token_id("eos_token_id") is not None

    def clean_spaces(self) -> bool:
        return self.pre.clean_spaces if self.model == "gpt2" else False


# --------------------------------------------------------------------------- tokenizer.json pieces


def _added_tokens(vocab: _Vocab) -> list[dict[str, Any]]:
    """Control / unknown tokens (special) and user-defined tokens (plain), split out of the raw text."""
    out = []
    for i, (text, kind) in enumerate(zip(vocab.tokens, vocab.types)):
        if kind in (_CONTROL, _UNKNOWN, _USER_DEFINED) and text:
            out.append(
                {
                    "id": i,
                    "content": text,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": kind != _USER_DEFINED,
                }
            )
    return out


def _post_processor(vocab: _Vocab) -> dict[str, Any]:
    bos = vocab.token("bos_token_id") if vocab.add_bos() else None
    eos = vocab.token("eos_token_id") if vocab.add_eos() else None
    if bos is None and eos is None and vocab.model == "gpt2":
        return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}

    def seq(name: str, type_id: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if bos is not None:
            items.append({"SpecialToken": {"id": bos, "type_id": type_id}})
        items.append({"Sequence": {"id": name, "type_id": type_id}})
        if eos is not None:
            items.append({"SpecialToken": {"id": eos, "type_id": type_id}})
        return items

    special: dict[str, Any] = {}
    for key, text in (("bos_token_id", bos), ("eos_token_id", eos)):
        if text is not None:
            special[text] = {"id": text, "ids": [vocab.token_id(key)], "tokens": [text]}
    return {
        "type": "TemplateProcessing",
        "single": seq("A", 0),
        "pair": seq("A", 0) + seq("B", 1),
        "special_tokens": special,
    }


def _split(pattern: str) -> dict[str, Any]:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def _bpe_json(vocab: _Vocab) -> dict[str, Any]:
    pre = vocab.pre
    merges = vocab.get("merges")
    if not isinstance(merges, list):
        raise ModelLoadError("The GGUF gpt2 tokenizer has no tokenizer.ggml.merges: the file is damaged.")
    pairs = []
    for m in merges:
        # llama.cpp splits at the first space after the first character (a merge's left part may be " ")
        pos = str(m).find(" ", 1)
        if pos < 0:
            raise ModelLoadError(f"The GGUF merge {m!r} is not two pieces separated by a space.")
        pairs.append([m[:pos], m[pos + 1 :]])
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": pre.gpt2_split}
    steps = [_split(p) for p in pre.splits] + [byte_level]
    return {
        "normalizer": {"type": "NFC"} if pre.nfc else None,
        "pre_tokenizer": steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps},
        "post_processor": _post_processor(vocab),
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": pre.ignore_merges,
            "vocab": {t: i for i, t in enumerate(vocab.tokens)},
            "merges": pairs,
        },
    }


def _spm_merges(tokens: Sequence[str], types: Sequence[int], scores: Sequence[float]) -> list[list[str]]:
    """BPE merges that replay sentencepiece's BPE: the pair whose joined piece scores highest merges first.

    Every normal piece is a merge target for each way of cutting it into two pieces of the
    vocabulary; merges are ranked by the target's score (highest first), then by the target's id,
    then by the length of the left part.
    """
    ids: dict[str, int] = {}
    for i, t in enumerate(tokens):
        ids.setdefault(t, i)
    ranked: list[tuple[float, int, int, str, str]] = []
    for i, (piece, kind) in enumerate(zip(tokens, types)):
        if kind != _NORMAL or len(piece) < 2 or ids.get(piece) != i:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in ids and right in ids:
                ranked.append((-float(scores[i]), i, cut, left, right))
    ranked.sort()
    return [[left, right] for _s, _i, _c, left, right in ranked]


def _spm_json(vocab: _Vocab) -> dict[str, Any]:
    scores = vocab.get("scores")
    if not isinstance(scores, list) or len(scores) != len(vocab.tokens):
        raise ModelLoadError(
            "The GGUF llama tokenizer needs tokenizer.ggml.scores, one per token: the file is damaged."
        )
    prefix = bool(vocab.get("add_space_prefix", True))
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    decoders: list[dict[str, Any]] = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if prefix:
        normalizer: dict[str, Any] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, replace]}
        pre_tokenizer = None
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    else:  # Gemma's layout
        normalizer = replace
        pre_tokenizer = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}
    vocab_ids: dict[str, int] = {}
    for i, t in enumerate(vocab.tokens):
        vocab_ids.setdefault(t, i)
    return {
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": _post_processor(vocab),
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": vocab.token("unknown_token_id"),
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab_ids,
            "merges": _spm_merges(vocab.tokens, vocab.types, scores),
        },
    }


def _chat_template(metadata: Mapping[str, Any]) -> str | list[dict[str, str]] | None:
    default = metadata.get("tokenizer.chat_template")
    names = metadata.get("tokenizer.chat_templates") or []
    named = [
        {"name": str(n), "template": str(metadata[f"tokenizer.chat_template.{n}"])}
        for n in names
        if f"tokenizer.chat_template.{n}" in metadata
    ]
    if not named:
        return None if default is None else str(default)
    if default is not None:
        named.insert(0, {"name": "default", "template": str(default)})
    return named


# --------------------------------------------------------------------------- public API


def tokenizer_files(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The tokenizer files of a model folder, from a GGUF file's metadata.

    Args:
        metadata: Every metadata key of the file mapped to its plain Python value
            (:attr:`inference4py.gguf.reader.GGUFFile.metadata`).

    Returns:
        ``{filename: JSON-able content}`` for ``"tokenizer.json"`` (the tokenizers library's
        format), ``"tokenizer_config.json"`` (chat template, special tokens, ``add_bos_token`` /
        ``add_eos_token``, ``clean_up_tokenization_spaces``, ``model_max_length``) and
        ``"special_tokens_map.json"``.  Write each with ``json.dump(..., ensure_ascii=False)``.

    Raises:
        UnsupportedModelError: ``tokenizer.ggml.model`` or ``tokenizer.ggml.pre`` is not one this
            module knows (the message lists the supported ones).
        ModelLoadError: The vocabulary fields are missing or inconsistent.

    Example:
        >>> from inference4py.gguf.reader import GGUFFile                        # doctest: +SKIP
        >>> files = tokenizer_files(GGUFFile("model.gguf").metadata)             # doctest: +SKIP
        >>> sorted(files)                                                       # doctest: +SKIP
        ['special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json']
    """
    vocab = _Vocab(metadata)
    body = _bpe_json(vocab) if vocab.model == "gpt2" else _spm_json(vocab)
    tokenizer_json = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(vocab),
        **body,
    }

    special = {
        "bos_token": vocab.token("bos_token_id"),
        "eos_token": vocab.token("eos_token_id"),
        "unk_token": vocab.token("unknown_token_id"),
        "pad_token": vocab.token("padding_token_id"),
    }
    arch = metadata.get("general.architecture")
    context = metadata.get(f"{arch}.context_length") if arch else None
    config: dict[str, Any] = {
        # named explicitly: a class picked from config.json's model_type would rebuild the post-processor
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": vocab.add_bos(),
        "add_eos_token": vocab.add_eos(),
        "clean_up_tokenization_spaces": vocab.clean_spaces(),
        "model_max_length": int(context) if context else int(1e30),
    }
    template = _chat_template(metadata)
    if template is not None:
        config["chat_template"] = template
    return {
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": config,
        "special_tokens_map.json": {k: v for k, v in special.items() if v is not None},
    }


def generation_defaults(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``bos_token_id``, ``eos_token_id`` and ``pad_token_id`` for generation_config.json.

    ``eos_token_id`` is a list: the file's eos, eot and eom tokens, then the control tokens llama.cpp
    also ends generation on (``<|im_end|>``, ``<end_of_turn>``, ``<|eot_id|>``, ``<|endoftext|>``...),
    each once; ``<|end|>`` is left out beside ``<|return|>`` and ``<|call|>`` (gpt-oss's harmony format,
    where it ends every message), as llama.cpp leaves it out.  Absent ids are left out (``pad_token_id`` may
    then be missing).

    Args:
        metadata: The GGUF metadata (see :func:`tokenizer_files`).

    Returns:
        ``{"bos_token_id": int, "eos_token_id": [int, ...], "pad_token_id": int}`` (keys with no value omitted).

    Raises:
        UnsupportedModelError / ModelLoadError: as :func:`tokenizer_files`.
    """
    vocab = _Vocab(metadata)
    eos: list[int] = []
    for key in ("eos_token_id", "eot_token_id", "eom_token_id"):
        i = vocab.token_id(key)
        if i is not None and i not in eos:
            eos.append(i)
    for i, (text, kind) in enumerate(zip(vocab.tokens, vocab.types)):
        if kind in (_CONTROL, _USER_DEFINED) and text in _EOG_TEXTS and i not in eos:
            eos.append(i)
    # gpt-oss's harmony format (o200k_harmony) ends each message with <|end|>, the reply with <|return|> or
    # <|call|>: where those are there, llama.cpp leaves <|end|> out of the stop tokens, and so does this
    texts = {vocab.tokens[i]: i for i in eos}
    if "<|end|>" in texts and (
        {"<|return|>", "<|call|>"} <= texts.keys() or {"<|calls|>", "<|flush|>"} <= texts.keys()
    ):
        eos.remove(texts["<|end|>"])
    out: dict[str, Any] = {}
    bos = vocab.token_id("bos_token_id")
    if bos is not None:
        out["bos_token_id"] = bos
    if eos:
        out["eos_token_id"] = eos
    pad = vocab.token_id("padding_token_id")
    if pad is not None:
        out["pad_token_id"] = pad
    return out
