"""The :class:`Tokenizer` interface and what every back end shares.

A back end implements encode / decode / id_to_token / token_to_id / vocab_size;
the base class holds the special tokens (names, ids, ``all_special_*``), the
chat templates (picking one by name or for tools, rendering it with
:func:`~inference4py.tokenization.chat_template.render_chat_template`) and
transformers' ``clean_up_tokenization``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError
from .chat_template import render_chat_template

__all__ = ["Tokenizer", "clean_up_tokenization"]

_SPECIAL_ATTRS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


class Tokenizer(ABC):
    """Text <-> token ids, special tokens and the chat template of one model.

    Build one with :func:`load_tokenizer`.  Ids and decoded text equal those of
    transformers' ``AutoTokenizer.from_pretrained`` on the same folder.
    """

    def __init__(
        self,
        *,
        special_tokens: Mapping[str, str | None],
        additional_special_tokens: Sequence[str],
        chat_template: str | dict[str, str] | None,
        clean_up_tokenization_spaces: bool,
        model_max_length: int | None,
    ) -> None:
        self._special_tokens = {k: special_tokens.get(k) for k in _SPECIAL_ATTRS}
        self._additional_special_tokens = tuple(additional_special_tokens)
        self._chat_templates = chat_template
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.model_max_length = model_max_length

    # -- to implement ------------------------------------------------------- #

    @abstractmethod
    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``.

        Args:
            text: The text; an empty string gives ``[]`` or only the special
                tokens the model adds (as transformers does).
            add_special_tokens: Add BOS/EOS etc. the way the model expects.

        Returns:
            The ids.
        """

    @abstractmethod
    def decode(
        self,
        ids: Iterable[int],
        *,
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        """Text of ``ids``, as transformers' ``tokenizer.decode``.

        Args:
            ids: Token ids.
            skip_special_tokens: Drop special tokens (BOS, EOS, pad...) from the text.
            clean_up_tokenization_spaces: Override the tokenizer config's setting
                (None keeps it).

        Returns:
            The text, with ``clean_up_tokenization_spaces`` applied when the
            tokenizer config asks for it.
        """

    @abstractmethod
    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary entry of ``token_id``, or None when out of range."""

    @abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """The id of vocabulary entry ``token``, or None when absent."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, added tokens included (``len(AutoTokenizer)``)."""

    # -- shared ----------------------------------------------------------------- #

    @property
    def max_token_chars(self) -> int:
        """The most characters one token's text has (its vocabulary string: byte-level characters are
        bytes, a byte-fallback piece is longer than its byte), cached: no token stands for more text.
        """
        cached = getattr(self, "_max_token_chars", None)
        if cached is None:
            cached = max((len(self.id_to_token(i) or "") for i in range(self.vocab_size)), default=1) or 1
            self._max_token_chars: int | None = cached
        return cached

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        """:meth:`encode` for several texts."""
        return [self.encode(t, add_special_tokens=add_special_tokens) for t in texts]

    def _clean(self, text: str, clean_up_tokenization_spaces: bool | None) -> str:
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def _native_decode_stream(
        self, context: Sequence[int], *, skip_special_tokens: bool
    ) -> Callable[[int | list[int]], str | None] | None:
        """A native incremental decoder, for :class:`~inference4py.generation.streaming.IncrementalDetokenizer`.

        The callable takes the next id (or ids) and returns the text they complete,
        or None while it waits, with the window algorithm of that class on raw text
        (no clean-up), starting after ``context``.  It may raise where that class
        waits (text that rewrites emitted text); the caller then goes on without it.
        None when this back end has no such decoder.
        """
        return None

    def _id_of(self, attr: str) -> int | None:
        token = self._special_tokens.get(attr)
        return None if token is None else self.token_to_id(token)

    @property
    def special_tokens(self) -> dict[str, str]:
        """``{"bos_token": "<s>", ...}`` for the special tokens that are set."""
        return {k: v for k, v in self._special_tokens.items() if v is not None}

    @property
    def additional_special_tokens(self) -> tuple[str, ...]:
        return self._additional_special_tokens

    @property
    def bos_token(self) -> str | None:
        return self._special_tokens["bos_token"]

    @property
    def eos_token(self) -> str | None:
        return self._special_tokens["eos_token"]

    @property
    def pad_token(self) -> str | None:
        return self._special_tokens["pad_token"]

    @property
    def unk_token(self) -> str | None:
        return self._special_tokens["unk_token"]

    @property
    def bos_token_id(self) -> int | None:
        return self._id_of("bos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._id_of("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._id_of("pad_token")

    @property
    def unk_token_id(self) -> int | None:
        return self._id_of("unk_token")

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """The tokenizer's EOS id as a tuple (empty when it has none).

        generation_config.json may name more; that is the generation config's job.
        """
        eos = self.eos_token_id
        return () if eos is None else (eos,)

    @property
    def all_special_tokens(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for attr in _SPECIAL_ATTRS:
            tok = self._special_tokens[attr]
            if tok is not None:
                seen.setdefault(tok, None)
        for tok in self._additional_special_tokens:
            seen.setdefault(tok, None)
        return tuple(seen)

    @property
    def all_special_ids(self) -> frozenset[int]:
        """Ids of the named special tokens and ``additional_special_tokens``."""
        ids = (self.token_to_id(t) for t in self.all_special_tokens)
        return frozenset(i for i in ids if i is not None)

    @property
    def chat_template(self) -> str | None:
        """The default chat template, or None when the model has none."""
        templates = self._chat_templates
        if isinstance(templates, dict):
            return templates.get("default")
        return templates

    @property
    def chat_templates(self) -> dict[str, str]:
        """All named chat templates (``{"default": ...}`` for a single one)."""
        templates = self._chat_templates
        if templates is None:
            return {}
        if isinstance(templates, dict):
            return dict(templates)
        return {"default": templates}

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        template: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """Render ``messages`` into a prompt with the model's chat template.

        Args:
            messages: ``[{"role": "user", "content": "Hi"}, ...]``.
            add_generation_prompt: End with the tokens that open an assistant turn.
            template: A Jinja template, or the name of one of the model's named
                templates, to use instead of the default.
            tools: Tool JSON schemas, passed to the template as ``tools``.
            **extra: More template variables (e.g. ``enable_thinking=False``).

        Returns:
            The prompt text (not tokenized; special tokens appear as text).

        Raises:
            InvalidInputError: Empty or malformed messages, or no template.

        Example:
            >>> tok.apply_chat_template([{"role": "user", "content": "Hi"}])  # doctest: +SKIP
        """
        chosen = self._pick_template(template, tools)
        special: dict[str, Any] = {k: v for k, v in self._special_tokens.items() if v}
        if self._additional_special_tokens:
            special["additional_special_tokens"] = list(self._additional_special_tokens)
        return render_chat_template(
            chosen,
            messages,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            special_tokens=special,
            **extra,
        )

    def _pick_template(self, template: str | None, tools: Any) -> str:
        named = self._chat_templates if isinstance(self._chat_templates, dict) else None
        if named is not None:
            if template is not None and template in named:
                return named[template]
            if template is not None:
                return template
            if tools is not None and "tool_use" in named:
                return named["tool_use"]
            if "default" in named:
                return named["default"]
            raise InvalidInputError(
                f"This model has several chat templates ({', '.join(sorted(named))}) and none is called "
                "'default': pass the name of one, or a template, with chat_template(...) on the builder."
            )
        if template is not None:
            return template
        if not isinstance(self._chat_templates, str):  # None: a dict was handled above
            raise InvalidInputError(
                "This model has no chat template (none in tokenizer_config.json or chat_template.jinja). "
                "Pass plain text instead of messages, or give a Jinja template with chat_template(...) "
                "on the builder."
            )
        return self._chat_templates

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(vocab_size={self.vocab_size}, bos={self.bos_token!r}, "
            f"eos={self.eos_token!r}, chat_template={'yes' if self.chat_template else 'no'})"
        )


def clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization``: drop the space before punctuation
    and English contractions (``" ."`` -> ``"."``, ``" n't"`` -> ``"n't"``...)."""
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )
