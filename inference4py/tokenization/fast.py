"""The ``tokenizers`` back end: ``tokenizer.json``, or GPT-2 style ``vocab.json`` + ``merges.txt``.

:class:`FastTokenizer` wraps a ``tokenizers.Tokenizer``; the loaders set it up
the way transformers' ``PreTrainedTokenizerFast`` (and the class's own
``__init__``) do: added and special tokens, the pre-tokenizer's
``add_prefix_space``, the BOS/EOS post-processor.  A folder with only
``vocab.json`` + ``merges.txt`` gets the byte-level BPE rebuilt as transformers'
``GPT2Converter`` / ``RobertaConverter`` do.  ``tokenizers`` is imported when a
tokenizer is loaded, never when this module is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, InvalidInputError, ModelLoadError
from .base import _SPECIAL_ATTRS, Tokenizer
from .settings import _read_json, _Settings

_LONG_TEXT = 8192  # characters: past this, encoding releases the interpreter lock


class FastTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` set up like transformers' ``PreTrainedTokenizerFast``."""

    def __init__(self, backend: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._backend = backend

    @property
    def backend(self) -> Any:
        """The underlying ``tokenizers.Tokenizer``."""
        return self._backend

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise InvalidInputError(f"text must be a str, got {type(text).__name__}.")
        if len(text) > _LONG_TEXT:
            # tokenizers' batch call releases the interpreter lock (its one-text call holds it, freezing
            # every other thread: a server's event loop and decode loop); same ids
            batch = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
            return batch([text], add_special_tokens=add_special_tokens)[0].ids
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        texts = list(texts)
        for t in texts:
            if not isinstance(t, str):
                raise InvalidInputError(f"texts must be strings, got {type(t).__name__}.")
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def decode(
        self,
        ids: Iterable[int],
        *,
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        text = self._backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        return self._clean(text, clean_up_tokenization_spaces)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(int(token_id))

    def _native_decode_stream(
        self, context: Sequence[int], *, skip_special_tokens: bool
    ) -> Callable[[int | list[int]], str | None] | None:
        # tokenizers' DecodeStream runs the same window algorithm as IncrementalDetokenizer,
        # in Rust: one call per token.  Releases without it (or without its ``ids``
        # argument, the context) leave the window code in Python.
        if type(self).decode is not FastTokenizer.decode:  # a subclass decoding otherwise
            return None
        try:
            from tokenizers.decoders import DecodeStream

            stream = DecodeStream(ids=[int(i) for i in context], skip_special_tokens=skip_special_tokens)
        except (ImportError, TypeError):
            return None
        return partial(stream.step, self._backend)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)


def _finish_fast(backend: Any, settings: _Settings) -> FastTokenizer:
    """Apply what PreTrainedTokenizerFast.__init__ (and the class's own __init__) do to the backend."""
    from tokenizers import AddedToken, processors

    special_strings = {t for t in settings.tokens.values() if t} | set(settings.additional)

    # Added tokens from the config that the backend does not already have with
    # the same flags, then special tokens that are not added tokens yet.
    existing = {tok.content: (i, tok) for i, tok in backend.get_added_tokens_decoder().items()}
    to_add: list[Any] = []
    seen: set[str] = set(existing)
    for _idx, spec in sorted(settings.added.items()):
        content = spec.get("content")
        if content is None:
            continue
        tok = AddedToken(
            content,
            single_word=bool(spec.get("single_word", False)),
            lstrip=bool(spec.get("lstrip", False)),
            rstrip=bool(spec.get("rstrip", False)),
            normalized=bool(spec.get("normalized", not spec.get("special", False))),
            special=bool(spec.get("special", False)),
        )
        have = existing.get(content)
        if have is not None and repr(have[1]) == repr(tok):
            continue
        tok.special = tok.special or content in special_strings
        to_add.append(tok)
        seen.add(content)
    for content in [settings.tokens[a] for a in _SPECIAL_ATTRS] + settings.additional:
        if content and content not in seen:
            to_add.append(AddedToken(content, special=True))
            seen.add(content)
    if to_add:
        backend.add_tokens(to_add)

    # The base class forces the pre-tokenizer's add_prefix_space to the config's value.
    prefix_space = settings.config.get("add_prefix_space", settings.class_defaults.get("prefix_space", False))
    try:
        state = json.loads(backend.pre_tokenizer.__getstate__())
        if "add_prefix_space" in state and state["add_prefix_space"] != prefix_space:
            from tokenizers import pre_tokenizers

            cls = getattr(pre_tokenizers, state.pop("type"))
            state["add_prefix_space"] = prefix_space
            backend.pre_tokenizer = cls(**state)
    except Exception:  # transformers ignores the same failures
        pass

    # LlamaTokenizerFast & co. rebuild the post-processor from add_bos/add_eos_token.
    bos_eos = settings.class_defaults.get("bos_eos")
    if bos_eos is not None:
        add_bos = bool(settings.flag("add_bos_token", bos_eos[0]))
        add_eos = bool(settings.flag("add_eos_token", bos_eos[1]))
        bos, eos = settings.tokens.get("bos_token"), settings.tokens.get("eos_token")
        if add_bos and bos is None:
            raise ConfigurationError("tokenizer_config.json sets add_bos_token but no bos_token: add one or unset it.")
        if add_eos and eos is None:
            raise ConfigurationError("tokenizer_config.json sets add_eos_token but no eos_token: add one or unset it.")
        bos, eos = bos or "", eos or ""  # only read when their flag is set, and then checked above
        single = f"{(bos + ':0 ') if add_bos else ''}$A:0{(' ' + eos + ':0') if add_eos else ''}"
        pair = f"{single}{(' ' + bos + ':1') if add_bos else ''} $B:1{(' ' + eos + ':1') if add_eos else ''}"
        special = []
        if add_bos:
            special.append((bos, backend.token_to_id(bos)))
        if add_eos:
            special.append((eos, backend.token_to_id(eos)))
        backend.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)

    return FastTokenizer(backend, **settings.common_kwargs())


def _load_tokenizer_json(folder: Path) -> FastTokenizer:
    from tokenizers import Tokenizer as Backend

    path = folder / "tokenizer.json"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        _read_json(path)  # raises the clear error for an unreadable file
        raise
    try:
        backend = Backend.from_str(text)  # parsed once, by tokenizers (a large vocabulary's JSON is MBs)
    except Exception as exc:  # tokenizers raises its own Exception type
        _read_json(path)  # invalid JSON: that error names the line
        raise ModelLoadError(
            f"{path} is not a tokenizer the `tokenizers` library can read ({exc}). "
            "Download the file again, or upgrade tokenizers (pip install -U tokenizers)."
        ) from exc
    return _finish_fast(backend, _Settings(folder, _added_tokens(backend)))


def _added_tokens(backend: Any) -> list[dict[str, Any]]:
    """tokenizer.json's ``added_tokens`` entries, as the backend read them."""
    fields = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")
    return [
        {"id": idx, **{name: getattr(token, name) for name in fields}}
        for idx, token in sorted(backend.get_added_tokens_decoder().items())
    ]


def _load_vocab_merges(folder: Path) -> FastTokenizer:
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, processors

    settings = _Settings(folder, None)
    vocab = _read_json(folder / "vocab.json")
    if not isinstance(vocab, dict):
        raise ModelLoadError(f"{folder / 'vocab.json'} must map tokens to ids. Download the file again.")
    try:
        text = (folder / "merges.txt").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"Cannot read {folder / 'merges.txt'}: {exc}. Download the file again.") from exc
    # Like GPT2Tokenizer: drop the "#version" header and the last line.
    pairs = [line.split() for line in text.split("\n")[1:-1]]
    merges = [(p[0], p[1]) for p in pairs if len(p) == 2]
    try:
        backend = Backend(
            models.BPE(
                vocab=vocab,
                merges=merges,
                dropout=None,
                continuing_subword_prefix="",
                end_of_word_suffix="",
                fuse_unk=False,
            )
        )
    except Exception as exc:
        raise ModelLoadError(f"vocab.json / merges.txt in {folder} do not form a BPE model ({exc}).") from exc
    prefix_space = bool(settings.config.get("add_prefix_space", False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    backend.decoder = decoders.ByteLevel()
    if settings.cls in ("BartTokenizer", "RobertaTokenizer"):
        sep, cls = settings.tokens.get("sep_token"), settings.tokens.get("cls_token")
        if sep is None or cls is None:
            raise ModelLoadError(
                f"{settings.cls} needs a sep_token and a cls_token in {folder / 'tokenizer_config.json'}: add them "
                "(BART and RoBERTa use </s> and <s>)."
            )
        backend.post_processor = processors.RobertaProcessing(  # (sep, cls) positional: stubs and runtime agree
            (sep, vocab.get(sep, 0)),
            (cls, vocab.get(cls, 0)),
            add_prefix_space=prefix_space,
            trim_offsets=True,
        )
    elif settings.flag("add_bos_token", False) and settings.tokens.get("bos_token"):
        bos = settings.tokens["bos_token"]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, vocab.get(bos, 0))]
        )
    else:
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
    if settings.cls is None:
        # No config names the class: GPT-2 defaults (<|endoftext|> when the vocab has it).
        for attr in ("unk_token", "bos_token", "eos_token"):
            if settings.tokens.get(attr) is None and "<|endoftext|>" in vocab:
                settings.tokens[attr] = "<|endoftext|>"
    return _finish_fast(backend, settings)
