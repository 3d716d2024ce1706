"""Whisper's tokenizer from the byte strings a whisper.cpp file carries, and OpenAI's suppress list.

A ggml file holds only the text tokens, as raw bytes in rank order (GPT-2's 50,256, or 50,257 for
the multilingual models); the special tokens follow in OpenAI's fixed order, so their ids come from
the counts alone:

``<|endoftext|>`` = number of text tokens, ``<|startoftranscript|>``, one token per language (as
many as the vocabulary size leaves: 99, or 100 for large-v3), ``<|translate|>``, ``<|transcribe|>``,
``<|startoflm|>``, ``<|startofprev|>``, ``<|nocaptions|>``, ``<|notimestamps|>``, then the 1,501
timestamps ``<|0.00|>`` ... ``<|30.00|>``.

A byte-level BPE needs merges, which the file does not hold: byte-pair encoding with ranks merges,
at each step, the adjacent pair whose concatenation has the lowest rank, so each token's merge is
the last step of encoding its own bytes with the ranks below its own (as tiktoken's rank files are
read).  The tokenizer.json written from that encodes every text as OpenAI's tiktoken does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from inference4py.errors import UnsupportedModelError

__all__ = [
    "TIMESTAMPS",
    "WHISPER_LANGUAGES",
    "byte_to_char",
    "non_speech_tokens",
    "special_tokens",
    "tokenizer_json",
]

#: Whisper's language codes and names, in vocabulary order (``<|en|>`` first; ``yue`` is large-v3's 100th).
WHISPER_LANGUAGES: dict[str, str] = {
    "en": "english",
    "zh": "chinese",
    "de": "german",
    "es": "spanish",
    "ru": "russian",
    "ko": "korean",
    "fr": "french",
    "ja": "japanese",
    "pt": "portuguese",
    "tr": "turkish",
    "pl": "polish",
    "ca": "catalan",
    "nl": "dutch",
    "ar": "arabic",
    "sv": "swedish",
    "it": "italian",
    "id": "indonesian",
    "hi": "hindi",
    "fi": "finnish",
    "vi": "vietnamese",
    "he": "hebrew",
    "uk": "ukrainian",
    "el": "greek",
    "ms": "malay",
    "cs": "czech",
    "ro": "romanian",
    "da": "danish",
    "hu": "hungarian",
    "ta": "tamil",
    "no": "norwegian",
    "th": "thai",
    "ur": "urdu",
    "hr": "croatian",
    "bg": "bulgarian",
    "lt": "lithuanian",
    "la": "latin",
    "mi": "maori",
    "ml": "malayalam",
    "cy": "welsh",
    "sk": "slovak",
    "te": "telugu",
    "fa": "persian",
    "lv": "latvian",
    "bn": "bengali",
    "sr": "serbian",
    "az": "azerbaijani",
    "sl": "slovenian",
    "kn": "kannada",
    "et": "estonian",
    "mk": "macedonian",
    "br": "breton",
    "eu": "basque",
    "is": "icelandic",
    "hy": "armenian",
    "ne": "nepali",
    "mn": "mongolian",
    "bs": "bosnian",
    "kk": "kazakh",
    "sq": "albanian",
    "sw": "swahili",
    "gl": "galician",
    "mr": "marathi",
    "pa": "punjabi",
    "si": "sinhala",
    "km": "khmer",
    "sn": "shona",
    "yo": "yoruba",
    "so": "somali",
    "af": "afrikaans",
    "oc": "occitan",
    "ka": "georgian",
    "be": "belarusian",
    "tg": "tajik",
    "sd": "sindhi",
    "gu": "gujarati",
    "am": "amharic",
    "yi": "yiddish",
    "lo": "lao",
    "uz": "uzbek",
    "fo": "faroese",
    "ht": "haitian creole",
    "ps": "pashto",
    "tk": "turkmen",
    "nn": "nynorsk",
    "mt": "maltese",
    "sa": "sanskrit",
    "lb": "luxembourgish",
    "my": "myanmar",
    "bo": "tibetan",
    "tl": "tagalog",
    "mg": "malagasy",
    "as": "assamese",
    "tt": "tatar",
    "haw": "hawaiian",
    "ln": "lingala",
    "ha": "hausa",
    "ba": "bashkir",
    "jw": "javanese",
    "su": "sundanese",
    "yue": "cantonese",
}


TIMESTAMPS = 1501  # <|0.00|> .. <|30.00|>
_AFTER_LANGUAGES = (
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nocaptions|>",
    "<|notimestamps|>",
)


@cache
def byte_to_char() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (the ByteLevel pre-tokenizer's alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def special_tokens(n_text: int, n_vocab: int, languages: Sequence[str]) -> list[str]:
    """The special tokens after ``n_text`` text tokens, in OpenAI's order (their ids follow on from ``n_text``).

    Raises:
        UnsupportedModelError: the sizes leave no room for a Whisper vocabulary.
    """
    n_languages = n_vocab - n_text - 2 - len(_AFTER_LANGUAGES) - TIMESTAMPS
    if not 0 < n_languages <= len(languages):
        raise UnsupportedModelError(
            f"A vocabulary of {n_vocab} tokens with {n_text} text tokens leaves {n_languages} language tokens; "
            f"Whisper has 1 to {len(languages)}. The file is not a Whisper model."
        )
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *(f"<|{code}|>" for code in languages[:n_languages]),
        *_AFTER_LANGUAGES,
        *(f"<|{i * 0.02:.2f}|>" for i in range(TIMESTAMPS)),
    ]


def _merges(tokens: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    """The merge that makes each multi-byte token, in rank order (see the module docstring)."""
    ranks = {t: i for i, t in enumerate(tokens)}
    merges = []
    for rank, token in enumerate(tokens):
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at : at + 2] = [parts[at] + parts[at + 1]]
        if len(parts) != 2 or parts[0] not in ranks or parts[1] not in ranks:
            raise UnsupportedModelError(
                f"Token {rank} ({token!r}) cannot be made from two lower-ranked tokens: the file's vocabulary is not "
                "a byte-pair encoding in rank order."
            )
        merges.append((parts[0], parts[1]))
    return merges


def tokenizer_json(tokens: Sequence[bytes], specials: Sequence[str]) -> dict[str, Any]:
    """A tokenizers ``tokenizer.json`` (byte-level BPE, GPT-2's pre-tokenizer) with ``specials`` after the text tokens."""
    char = byte_to_char()

    def text(b: bytes) -> str:
        return "".join(char[x] for x in b)

    n = len(tokens)
    added = [
        {
            "id": n + i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": not s[2:3].isdigit(),  # timestamps are plain added tokens, as in the Hub's files
        }
        for i, s in enumerate(specials)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": _template(n, specials),
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {text(t): i for i, t in enumerate(tokens)},
            "merges": [[text(a), text(b)] for a, b in _merges(tokens)],
        },
    }


def _template(n_text: int, specials: Sequence[str]) -> dict[str, Any]:
    """The Hub files' post-processor: ``<|startoftranscript|> <|notimestamps|> text <|endoftext|>``."""
    ids = {s: n_text + i for i, s in enumerate(specials)}
    names = ("<|startoftranscript|>", "<|notimestamps|>", "<|endoftext|>")

    def special(name: str, type_id: int = 0) -> dict[str, Any]:
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    return {
        "type": "TemplateProcessing",
        "single": [special(names[0]), special(names[1]), {"Sequence": {"id": "A", "type_id": 0}}, special(names[2])],
        "pair": [
            special(names[0]),
            special(names[1]),
            {"Sequence": {"id": "A", "type_id": 0}},
            {"Sequence": {"id": "B", "type_id": 1}},
            special(names[2], 1),
        ],
        "special_tokens": {name: {"id": name, "ids": [ids[name]], "tokens": [name]} for name in names},
    }


def non_speech_tokens(tokenizer: Any) -> list[int]:
    """OpenAI's ``non_speech_tokens``: symbols a transcript never holds, each alone or after a space, when one token.

    ``tokenizer``: a ``tokenizers.Tokenizer``.
    """
    symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
    symbols += [
        "<<",
        ">>",
        "<<<",
        ">>>",
        "--",
        "---",
        "-(",
        "-[",
        "('",
        '("',
        "((",
        "))",
        "(((",
        ")))",
        "[[",
        "]]",
        "{{",
        "}}",
        "♪♪",
        "♪♪♪",
    ]
    musical = set("♩♪♫♬♭♮♯")

    def ids(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    found = {ids(" -")[0], ids(" '")[0]}
    for symbol in symbols + sorted(musical):
        for tokens in (ids(symbol), ids(" " + symbol)):
            if len(tokens) == 1 or (symbol in musical and tokens):
                found.add(tokens[0])
    return sorted(found)


def suppress_lists(tokenizer: Any, ids: Mapping[str, int]) -> tuple[list[int], list[int]]:
    """(suppress_tokens, begin_suppress_tokens) as the Hub's Whisper generation configs hold them."""
    suppress = non_speech_tokens(tokenizer) + [
        ids[k] for k in ("sot", "translate", "transcribe", "startoflm", "startofprev", "nospeech")
    ]
    space = tokenizer.encode(" ", add_special_tokens=False).ids
    return suppress, [*space[:1], ids["eot"]]
