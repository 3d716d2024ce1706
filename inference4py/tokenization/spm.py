"""The ``sentencepiece`` back end: transformers' slow ``T5Tokenizer`` / ``LlamaTokenizer`` / ``MarianTokenizer``.

For folders with only ``spiece.model`` / ``tokenizer.model`` (T5, Llama) and for
Marian's two models: ``source.spm`` encodes, ``target.spm`` decodes, and
``vocab.json`` (or ``target_vocab.json``) maps pieces to ids.
:class:`_SentencePieceTokenizer` reproduces the slow classes' added-token
splitting, BOS/EOS and decode spacing; the loaders fill in each class's defaults.
``sentencepiece`` is imported when a model is loaded, never when this module is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError, ModelFilesMissingError, ModelLoadError
from .base import _SPECIAL_ATTRS, Tokenizer
from .settings import _CLASS_DEFAULTS, _read_json, _Settings

_SPIECE_UNDERLINE = "\u2581"


class _AddedToken:
    __slots__ = ("content", "lstrip", "rstrip", "single_word", "special")

    def __init__(
        self,
        content: str,
        *,
        lstrip: bool = False,
        rstrip: bool = False,
        single_word: bool = False,
        special: bool = True,
    ) -> None:
        self.content = content
        self.lstrip = lstrip
        self.rstrip = rstrip
        self.single_word = single_word
        self.special = special


class _SentencePieceTokenizer(Tokenizer):
    """transformers' slow ``T5Tokenizer`` / ``LlamaTokenizer`` / ``MarianTokenizer`` on sentencepiece.

    ``flavour`` selects the class-specific parts: ``"t5"`` (EOS appended unless
    already last, decode strips), ``"llama"`` (BOS/EOS per add_bos_token /
    add_eos_token) or ``"marian"`` (pieces mapped through vocab.json, a target
    model for decoding, ``</s>`` appended).
    """

    def __init__(
        self,
        *,
        flavour: str,
        source: Any,
        target: Any,
        encoder: dict[str, int] | None,
        decoder: dict[int, str] | None,
        added_tokens: dict[int, _AddedToken],
        add_bos: bool,
        add_eos: bool,
        add_prefix_space: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._flavour = flavour
        # transformers' slow T5/Llama decode puts a space *before the text that
        # precedes* a special token when special tokens are kept, so that text
        # is only final once the next special token (or the end) is known.
        self._stream_hold_until_special = flavour in ("t5", "llama")
        self._source = source
        self._target = target
        self._encoder = encoder  # piece -> id (Marian's vocab.json); None: the spm ids
        self._decoder = decoder
        self._add_bos = add_bos
        self._add_eos = add_eos
        self._add_prefix_space = add_prefix_space
        self._base_size = len(encoder) if encoder is not None else source.get_piece_size()
        self._added_by_id = dict(sorted(added_tokens.items()))
        self._added_by_text = {t.content: i for i, t in self._added_by_id.items()}
        self._splitter = None
        if self._added_by_text:
            alternatives = sorted(self._added_by_text, key=len, reverse=True)
            self._splitter = re.compile("(" + "|".join(re.escape(a) for a in alternatives) + ")")
        self._special_set = frozenset(self.all_special_tokens)
        self._special_ids = frozenset(i for i in (self.token_to_id(t) for t in self._special_set) if i is not None)
        # transformers' _decode keeps "legacy added tokens" (added, non-special,
        # or additional specials beyond the base vocab) as separate text chunks.
        self._legacy_added = (set(self._added_by_text) - self._special_set) | {
            t for t in self._additional_special_tokens if (self.token_to_id(t) or 0) >= self._base_size
        }

    # -- encode ------------------------------------------------------------- #

    def _split_added(self, text: str) -> list[str]:
        if self._splitter is None:
            return [text]
        parts = [p for p in self._splitter.split(text)]
        # the splitter yields [text, tok, text, tok, ..., text]
        for i in range(1, len(parts), 2):
            tok = self._added_by_id[self._added_by_text[parts[i]]]
            if tok.rstrip and i + 1 < len(parts) and parts[i + 1]:
                parts[i + 1] = parts[i + 1].lstrip()
            if tok.lstrip and parts[i - 1]:
                parts[i - 1] = parts[i - 1].rstrip()
        return parts

    def _tokenize_chunk(self, chunk: str) -> list[str]:
        if self._flavour == "marian":
            code: list[str] = []
            if chunk.startswith(">>") and (end := chunk.find("<<")) != -1:
                code.append(chunk[: end + 2])
                chunk = chunk[end + 2 :]
            return code + self._source.encode(chunk, out_type=str)
        return self._source.encode(chunk, out_type=str)

    def _piece_to_id(self, piece: str) -> int:
        added = self._added_by_text.get(piece)
        if added is not None:
            return added
        if self._encoder is not None:
            unk = self._encoder.get(self.unk_token or "<unk>", 0)
            return self._encoder.get(piece, unk)
        return self._source.piece_to_id(piece)

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise InvalidInputError(f"text must be a str, got {type(text).__name__}.")
        ids: list[int] = []
        for i, part in enumerate(self._split_added(text)):
            if not part:
                continue
            if i % 2 == 1:
                ids.append(self._added_by_text[part])
            else:
                ids.extend(self._piece_to_id(p) for p in self._tokenize_chunk(part))
        if not add_special_tokens:
            return ids
        eos_id = self.eos_token_id
        if self._flavour == "t5":
            if eos_id is not None and not (ids and ids[-1] == eos_id):
                ids.append(eos_id)
            return ids
        if self._flavour == "marian":
            return ids + [eos_id] if eos_id is not None else ids
        bos = [self.bos_token_id] if self._add_bos and self.bos_token_id is not None else []
        eos = [eos_id] if self._add_eos and eos_id is not None else []
        return bos + ids + eos

    # -- decode ------------------------------------------------------------- #

    def id_to_token(self, token_id: int) -> str | None:
        token_id = int(token_id)
        added = self._added_by_id.get(token_id)
        if added is not None:
            return added.content
        if self._decoder is not None:
            return self._decoder.get(token_id)
        if 0 <= token_id < self._source.get_piece_size():
            return self._source.id_to_piece(token_id)
        return None

    def token_to_id(self, token: str) -> int | None:
        added = self._added_by_text.get(token)
        if added is not None:
            return added
        if self._encoder is not None:
            return self._encoder.get(token)
        i = self._source.piece_to_id(token)
        if i == self._source.unk_id() and token != self._source.id_to_piece(i):
            return None
        return i

    def _tokens_to_string(self, tokens: list[str]) -> str:
        sp = self._target
        special = self._special_set
        if self._flavour == "marian":
            out = ""
            current: list[str] = []
            for token in tokens:
                if token in special:
                    out += sp.decode_pieces(current) + token + " "
                    current = []
                else:
                    current.append(token)
            out += sp.decode_pieces(current)
            return out.replace(_SPIECE_UNDERLINE, " ").strip()
        tokens = list(tokens)
        if tokens[0].startswith(_SPIECE_UNDERLINE) and self._add_prefix_space:
            tokens[0] = tokens[0][1:]
        out = ""
        current = []
        prev_is_special = False
        for i, token in enumerate(tokens):
            if token in special:
                if self._flavour == "t5":
                    if not prev_is_special:
                        out += " "
                elif not prev_is_special and i != 0:  # llama, legacy
                    out += " "
                out += sp.decode(current) + token
                prev_is_special = True
                current = []
            else:
                if (
                    self._flavour == "llama"
                    and prev_is_special
                    and i == 1
                    and self._add_prefix_space
                    and not token.startswith(_SPIECE_UNDERLINE)
                ):
                    out += " "
                current.append(token)
                prev_is_special = False
        out += sp.decode(current)
        return out.strip() if self._flavour == "t5" else out

    def decode(
        self,
        ids: Iterable[int],
        *,
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        tokens = []
        for i in ids:
            i = int(i)
            if skip_special_tokens and i in self._special_ids:
                continue
            tok = self.id_to_token(i)
            tokens.append((self.unk_token or "") if tok is None else tok)
        sub_texts: list[str] = []
        current: list[str] = []
        for token in tokens:
            if skip_special_tokens and token in self._special_set:
                continue
            if token in self._legacy_added:
                if current:
                    s = self._tokens_to_string(current)
                    if s:
                        sub_texts.append(s)
                    current = []
                sub_texts.append(token)
            else:
                current.append(token)
        if current:
            sub_texts.append(self._tokens_to_string(current))
        return self._clean(" ".join(sub_texts), clean_up_tokenization_spaces)

    @property
    def vocab_size(self) -> int:
        top = max(self._added_by_id, default=-1) + 1
        return max(self._base_size, top)


def _load_spm(path: Path) -> Any:
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor()
    try:
        processor.Load(str(path))
    except (OSError, RuntimeError) as exc:
        raise ModelLoadError(f"{path} is not a sentencepiece model ({exc}). Download the file again.") from exc
    return processor


def _spm_added_tokens(
    settings: _Settings, *, base_size: int, flavour: str, lookup: Any
) -> tuple[dict[int, _AddedToken], list[str]]:
    """Added tokens of a slow tokenizer: config's added_tokens_decoder, else the class defaults."""
    added: dict[int, _AddedToken] = {}
    additional = list(settings.additional)
    if settings.added:
        for idx, spec in settings.added.items():
            added[idx] = _AddedToken(
                spec["content"],
                lstrip=bool(spec.get("lstrip")),
                rstrip=bool(spec.get("rstrip")),
                single_word=bool(spec.get("single_word")),
                special=bool(spec.get("special", False)),
            )
    elif flavour == "t5":
        extra_ids = int(settings.config.get("extra_ids", 100) or 0)
        extra = [t for t in additional if "<extra_id_" in t]
        if not extra and extra_ids:
            extra = [f"<extra_id_{i}>" for i in range(extra_ids)]
            additional += extra
        for i, content in enumerate(extra):
            added[base_size - 1 + extra_ids - i] = _AddedToken(content, lstrip=True, rstrip=True)
    # Special tokens become added tokens at their vocabulary id (or after it).
    taken = {t.content for t in added.values()}
    next_id = max([base_size - 1, *added]) + 1
    for special in [settings.tokens[a] for a in _SPECIAL_ATTRS] + additional:
        if not special or special in taken:
            continue
        idx = lookup(special)
        if idx is None:
            idx = next_id
            next_id += 1
        added[idx] = _AddedToken(special)
        taken.add(special)
    return added, additional


def _load_sentencepiece(folder: Path, model_file: Path) -> _SentencePieceTokenizer:
    settings = _Settings(folder, None)
    sp = _load_spm(model_file)
    flavour = "t5" if (settings.cls == "T5Tokenizer" or model_file.name == "spiece.model") else "llama"
    if settings.cls is None and flavour == "llama":
        settings.class_defaults = _CLASS_DEFAULTS["LlamaTokenizer"]
    if flavour == "t5":
        defaults = _CLASS_DEFAULTS["T5Tokenizer"]["tokens"]
    else:
        defaults = _CLASS_DEFAULTS["LlamaTokenizer"]["tokens"]
    for attr, value in defaults.items():
        if attr not in settings.config and settings.tokens.get(attr) is None:
            settings.tokens[attr] = value

    def lookup(token: str) -> int | None:
        i = sp.piece_to_id(token)
        return None if (i == sp.unk_id() and token != sp.id_to_piece(i)) else i

    added, additional = _spm_added_tokens(settings, base_size=sp.get_piece_size(), flavour=flavour, lookup=lookup)
    kwargs = settings.common_kwargs()
    kwargs["additional_special_tokens"] = additional
    add_bos = bool(settings.flag("add_bos_token", flavour == "llama"))
    add_eos = bool(settings.flag("add_eos_token", False))
    return _SentencePieceTokenizer(
        flavour=flavour,
        source=sp,
        target=sp,
        encoder=None,
        decoder=None,
        added_tokens=added,
        add_bos=add_bos,
        add_eos=add_eos,
        add_prefix_space=bool(settings.flag("add_prefix_space", True)),
        **kwargs,
    )


def _load_marian(folder: Path) -> _SentencePieceTokenizer:
    settings = _Settings(folder, None)
    for attr, value in _CLASS_DEFAULTS["MarianTokenizer"]["tokens"].items():
        if attr not in settings.config and settings.tokens.get(attr) is None:
            settings.tokens[attr] = value
    encoder = _read_json(folder / "vocab.json")
    if not isinstance(encoder, dict):
        raise ModelLoadError(f"{folder / 'vocab.json'} must map tokens to ids. Download the file again.")
    if str(settings.tokens.get("unk_token")) not in encoder:
        raise ModelLoadError(f"{folder / 'vocab.json'} has no {settings.tokens.get('unk_token')!r} entry.")
    decoder = {v: k for k, v in encoder.items()}
    target_vocab = settings.config.get("target_vocab_file")
    if settings.config.get("separate_vocabs") and (folder / "target_vocab.json").is_file():
        target = _read_json(folder / "target_vocab.json")
        decoder = {v: k for k, v in target.items()}
    elif settings.config.get("separate_vocabs") and target_vocab:
        raise ModelFilesMissingError(
            f"{folder} is a Marian tokenizer with separate vocabularies but target_vocab.json is missing. "
            "Download it next to vocab.json.",
            ["target_vocab.json"],
        )
    source = _load_spm(folder / "source.spm")
    target_spm = _load_spm(folder / "target.spm")
    added, additional = _spm_added_tokens(settings, base_size=len(encoder), flavour="marian", lookup=encoder.get)
    kwargs = settings.common_kwargs()
    kwargs["additional_special_tokens"] = additional
    return _SentencePieceTokenizer(
        flavour="marian",
        source=source,
        target=target_spm,
        encoder=encoder,
        decoder=decoder,
        added_tokens=added,
        add_bos=False,
        add_eos=True,
        add_prefix_space=False,
        **kwargs,
    )
