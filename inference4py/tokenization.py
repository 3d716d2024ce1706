"""Tokenizers and chat templates, matching transformers' ``AutoTokenizer``.

One interface, :class:`Tokenizer`, over two back ends:

* the Rust ``tokenizers`` library, for folders with a ``tokenizer.json`` and for
  GPT-2 style folders with only ``vocab.json`` + ``merges.txt`` (the byte-level
  BPE is rebuilt the way transformers' ``GPT2Converter`` / ``RobertaConverter`` do);
* ``sentencepiece``, for folders with only ``spiece.model`` / ``tokenizer.model``
  (T5, Llama) and for Marian's ``source.spm`` + ``target.spm`` + ``vocab.json``,
  reproducing transformers' slow ``T5Tokenizer`` / ``LlamaTokenizer`` /
  ``MarianTokenizer``.

:func:`load_tokenizer` picks the back end from the files present and reads
``tokenizer_config.json`` (special tokens, ``added_tokens_decoder``,
``add_bos_token`` / ``add_eos_token``, ``clean_up_tokenization_spaces``,
``chat_template``, ``model_max_length``) the way transformers 4.57 does, so that
ids and decoded text equal ``AutoTokenizer``'s for the same files.

Example:
    >>> tok = load_tokenizer("path/to/model")            # doctest: +SKIP
    >>> ids = tok.encode("Hello world")                    # doctest: +SKIP
    >>> tok.decode(ids)                                    # doctest: +SKIP
    'Hello world'
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from .errors import (
    ConfigurationError,
    InvalidInputError,
    ModelFilesMissingError,
    ModelLoadError,
)

__all__ = ["Tokenizer", "load_tokenizer", "render_chat_template", "clean_up_tokenization"]

_SPECIAL_ATTRS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_SPIECE_UNDERLINE = "\u2581"

# Per tokenizer class (name without "Fast"): the defaults transformers' class
# __init__ uses when tokenizer_config.json does not say otherwise.
#   tokens: default special tokens; bos_eos: (add_bos_token, add_eos_token)
#   defaults for classes whose fast __init__ rebuilds the post-processor
#   (LlamaTokenizerFast.update_post_processor and friends); prefix_space: the
#   add_prefix_space default the base class compares the pre-tokenizer against.
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "GPT2Tokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    },
    "Qwen2Tokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
    },
    "LlamaTokenizer": {
        "tokens": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
        "bos_eos": (True, False),
        "prefix_space": None,
    },
    "CodeLlamaTokenizer": {
        "tokens": {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
        "bos_eos": (True, False),
        "prefix_space": None,
    },
    "GemmaTokenizer": {
        "tokens": {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
        "bos_eos": (True, False),
    },
    "CohereTokenizer": {
        "tokens": {"unk_token": "<UNK>", "bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"},
        "bos_eos": (True, False),
    },
    "GPTNeoXTokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        "bos_eos": (False, False),
    },
    "T5Tokenizer": {
        "tokens": {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
    },
    "BartTokenizer": {
        "tokens": {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "sep_token": "</s>",
            "cls_token": "<s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "mask_token": "<mask>",
        },
    },
    "WhisperTokenizer": {
        "tokens": {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    },
    "MarianTokenizer": {
        "tokens": {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"},
    },
}
_CLASS_DEFAULTS["RobertaTokenizer"] = _CLASS_DEFAULTS["BartTokenizer"]

# config.json model_type -> tokenizer class, for folders whose
# tokenizer_config.json does not name one (transformers' TOKENIZER_MAPPING_NAMES).
_MODEL_TYPE_TO_CLASS = {
    "gpt2": "GPT2Tokenizer",
    "gpt_bigcode": "GPT2Tokenizer",
    "llama": "LlamaTokenizer",
    "mistral": "LlamaTokenizer",
    "mixtral": "LlamaTokenizer",
    "phi3": "LlamaTokenizer",
    "qwen2": "Qwen2Tokenizer",
    "qwen3": "Qwen2Tokenizer",
    "gemma": "GemmaTokenizer",
    "gemma2": "GemmaTokenizer",
    "gpt_neox": "GPTNeoXTokenizer",
    "t5": "T5Tokenizer",
    "mt5": "T5Tokenizer",
    "bart": "BartTokenizer",
    "mbart": "BartTokenizer",
    "roberta": "RobertaTokenizer",
    "marian": "MarianTokenizer",
    "whisper": "WhisperTokenizer",
}


# --------------------------------------------------------------------------- #
# chat templates
# --------------------------------------------------------------------------- #


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # Like transformers: no HTML escaping (jinja's own tojson escapes <, >, &, ')
    # and the json.dumps options exposed.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def _compile_template(template: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _GenerationTag(jinja2.ext.Extension):
        # Some templates mark assistant turns with {% generation %}...{% endgeneration %}
        # (transformers' AssistantTracker); rendering just keeps the body.
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller: Any) -> str:
            return caller()

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ConfigurationError(
            f"The chat template is not valid Jinja (line {exc.lineno}: {exc.message}). "
            "Fix the template or pass another one with chat_template(...) on the builder."
        ) from exc


def _validate_messages(messages: Any) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInputError(
            "messages must be a list of dicts like [{'role': 'user', 'content': 'Hi'}], "
            f"got {type(messages).__name__}."
        )
    if len(messages) == 0:
        raise InvalidInputError(
            "messages is empty: pass at least one message, e.g. [{'role': 'user', 'content': 'Hi'}]."
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidInputError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {type(message).__name__}."
            )
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidInputError(
                f"messages[{i}] needs a non-empty string 'role' (e.g. 'system', 'user', 'assistant'), got {role!r}."
            )
        content = message.get("content")
        # Assistant turns that only carry tool calls may have no content; multimodal
        # content is a list of parts.  Anything else must be text.
        if content is None and "tool_calls" in message:
            pass
        elif not isinstance(content, (str, list)):
            raise InvalidInputError(f"messages[{i}] needs a string 'content', got {type(content).__name__}.")
        out.append(dict(message))
    return out


def render_chat_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
    special_tokens: Mapping[str, Any] | None = None,
    **extra: Any,
) -> str:
    """Render a Jinja chat template the way transformers' ``apply_chat_template`` does.

    Args:
        template: The Jinja source.
        messages: ``[{"role": ..., "content": ...}, ...]``.
        add_generation_prompt: Append the prompt that starts an assistant turn.
        tools: JSON schemas of tools (dicts), passed to the template as ``tools``.
        special_tokens: ``bos_token``, ``eos_token``... as strings.
        **extra: More template variables; they override ``special_tokens``.

    Returns:
        The rendered prompt text.

    Raises:
        InvalidInputError: Bad messages or tools, or the template raised an error
            (e.g. via ``raise_exception``) for these messages.
        ConfigurationError: The template is not valid Jinja.
    """
    import jinja2

    checked = _validate_messages(messages)
    tool_schemas = None
    if tools is not None:
        tool_schemas = []
        for tool in tools:
            if not isinstance(tool, Mapping):
                raise InvalidInputError(
                    "tools must be JSON schemas (dicts) like "
                    "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}; "
                    f"got {type(tool).__name__}."
                )
            tool_schemas.append(dict(tool))
    documents = extra.pop("documents", None)
    compiled = _compile_template(template)
    variables = {**dict(special_tokens or {}), **extra}
    try:
        return compiled.render(
            messages=checked,
            tools=tool_schemas,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
    except jinja2.exceptions.TemplateError as exc:
        raise InvalidInputError(f"The chat template rejected these messages: {exc}") from exc


# --------------------------------------------------------------------------- #
# the interface
# --------------------------------------------------------------------------- #


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

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = True) -> list[list[int]]:
        """:meth:`encode` for several texts."""
        return [self.encode(t, add_special_tokens=add_special_tokens) for t in texts]

    def _clean(self, text: str, clean_up_tokenization_spaces: bool | None) -> str:
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def decode_batch(self, batch: Iterable[Iterable[int]], *, skip_special_tokens: bool = True) -> list[str]:
        """:meth:`decode` for several id lists."""
        return [self.decode(ids, skip_special_tokens=skip_special_tokens) for ids in batch]

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


# --------------------------------------------------------------------------- #
# tokenizers back end (tokenizer.json, vocab.json + merges.txt)
# --------------------------------------------------------------------------- #


class _FastTokenizer(Tokenizer):
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
        if type(self).decode is not _FastTokenizer.decode:  # a subclass decoding otherwise
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


# --------------------------------------------------------------------------- #
# sentencepiece back end (T5, Llama, Marian without tokenizer.json)
# --------------------------------------------------------------------------- #


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


# --------------------------------------------------------------------------- #
# loading
# --------------------------------------------------------------------------- #


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}). Download the file again or fix it."
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}. Check the file's permissions and encoding.") from exc


def _token_content(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value.get("content")
    return str(value)


def _resolve_class(folder: Path, config: Mapping[str, Any]) -> str | None:
    name = config.get("tokenizer_class")
    if not name and (folder / "config.json").is_file():
        try:
            model_config = _read_json(folder / "config.json")
        except ModelLoadError:
            model_config = {}
        if isinstance(model_config, Mapping):
            name = model_config.get("tokenizer_class") or _MODEL_TYPE_TO_CLASS.get(
                str(model_config.get("model_type", ""))
            )
    if not name:
        return None
    return str(name).removesuffix("Fast")


class _Settings:
    """tokenizer_config.json (+ special_tokens_map.json, chat templates) resolved like transformers."""

    def __init__(self, folder: Path, backend_added: list[dict[str, Any]] | None) -> None:
        path = folder / "tokenizer_config.json"
        config = _read_json(path) if path.is_file() else {}
        if not isinstance(config, dict):
            raise ModelLoadError(f"{path} must hold a JSON object. Download the file again or fix it.")
        self.config = config
        self.cls = _resolve_class(folder, config)
        defaults = _CLASS_DEFAULTS.get(self.cls or "", {})
        self.class_defaults = defaults

        # added_tokens_decoder: modern configs carry it; legacy folders get it from
        # tokenizer.json's added_tokens and take special tokens from special_tokens_map.json.
        self.added: dict[int, dict[str, Any]] = {}
        if "added_tokens_decoder" in config:
            for idx, tok in (config.get("added_tokens_decoder") or {}).items():
                if isinstance(tok, Mapping):
                    self.added[int(idx)] = dict(tok)
        else:
            stm = folder / "special_tokens_map.json"
            if stm.is_file():
                smap = _read_json(stm)
                if isinstance(smap, Mapping):
                    for key, value in smap.items():
                        if key == "additional_special_tokens" and isinstance(value, list):
                            existing = list(config.get("additional_special_tokens") or [])
                            names = [_token_content(v) for v in existing]
                            for v in value:
                                if _token_content(v) not in names:
                                    existing.append(v)
                            config[key] = existing
                        else:
                            config[key] = value
            for tok in backend_added or []:
                t = dict(tok)
                self.added[int(t.pop("id"))] = t

        self.tokens: dict[str, str | None] = {}
        for attr in _SPECIAL_ATTRS:
            if attr in config:
                self.tokens[attr] = _token_content(config[attr])
            else:
                self.tokens[attr] = defaults.get("tokens", {}).get(attr)
        self.additional = [t for t in (_token_content(v) for v in config.get("additional_special_tokens") or []) if t]
        self.clean_up = bool(config.get("clean_up_tokenization_spaces", False))
        mml = config.get("model_max_length")
        # transformers stores "no limit" as int(1e30)
        self.model_max_length = int(mml) if isinstance(mml, (int, float)) and mml < 1e29 else None

        templates: dict[str, str] = {}
        jinja_file = folder / "chat_template.jinja"
        templates_dir = folder / "additional_chat_templates"
        if jinja_file.is_file():
            templates["default"] = jinja_file.read_text(encoding="utf-8")
        if templates_dir.is_dir():
            for f in sorted(templates_dir.glob("*.jinja")):
                templates[f.stem] = f.read_text(encoding="utf-8")
        chat_template: str | dict[str, str] | None
        if templates:
            chat_template = templates["default"] if list(templates) == ["default"] else templates
        else:
            raw = config.get("chat_template")
            if raw is None and (folder / "chat_template.json").is_file():
                # processors save {"chat_template": ...} in chat_template.json
                raw_json = _read_json(folder / "chat_template.json")
                raw = raw_json.get("chat_template") if isinstance(raw_json, Mapping) else None
            if isinstance(raw, list):
                chat_template = {
                    str(t["name"]): str(t["template"])
                    for t in raw
                    if isinstance(t, Mapping) and "name" in t and "template" in t
                }
            elif isinstance(raw, str):
                chat_template = raw
            else:
                chat_template = None
        self.chat_template = chat_template

    def common_kwargs(self) -> dict[str, Any]:
        return {
            "special_tokens": self.tokens,
            "additional_special_tokens": self.additional,
            "chat_template": self.chat_template,
            "clean_up_tokenization_spaces": self.clean_up,
            "model_max_length": self.model_max_length,
        }

    def flag(self, name: str, default: Any) -> Any:
        value = self.config.get(name, default)
        return default if value is None else value


def _finish_fast(backend: Any, settings: _Settings) -> _FastTokenizer:
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
    except Exception:  # noqa: BLE001 - transformers ignores the same failures
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

    return _FastTokenizer(backend, **settings.common_kwargs())


def _load_tokenizer_json(folder: Path) -> _FastTokenizer:
    from tokenizers import Tokenizer as Backend

    path = folder / "tokenizer.json"
    raw = _read_json(path)
    try:
        backend = Backend.from_str(json.dumps(raw))
    except Exception as exc:  # tokenizers raises its own Exception type
        raise ModelLoadError(
            f"{path} is not a tokenizer the `tokenizers` library can read ({exc}). "
            "Download the file again, or upgrade tokenizers (pip install -U tokenizers)."
        ) from exc
    added = raw.get("added_tokens") if isinstance(raw, dict) else None
    return _finish_fast(backend, _Settings(folder, added))


def _load_vocab_merges(folder: Path) -> _FastTokenizer:
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
    merges = [tuple(line.split()) for line in text.split("\n")[1:-1]]
    merges = [m for m in merges if len(m) == 2]
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
        backend.post_processor = processors.RobertaProcessing(
            sep=(sep, vocab.get(sep, 0)),
            cls=(cls, vocab.get(cls, 0)),
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


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """Load the tokenizer of a local model folder.

    Files are tried in this order: Marian's ``source.spm`` + ``target.spm`` +
    ``vocab.json``; ``tokenizer.json``; ``vocab.json`` + ``merges.txt``
    (byte-level BPE, GPT-2 / BART style); ``spiece.model`` or
    ``tokenizer.model`` (sentencepiece).  ``tokenizer_config.json``,
    ``special_tokens_map.json`` and ``chat_template.jinja`` are read when present.

    Args:
        folder: A local folder (use :mod:`inference4py.hub` for hub ids).

    Returns:
        A :class:`Tokenizer` whose ids equal transformers' ``AutoTokenizer``'s.

    Raises:
        ModelNotFoundError: ``folder`` does not exist.
        ModelFilesMissingError: No tokenizer files in the folder.
        ModelLoadError: A tokenizer file is corrupt.

    Example:
        >>> tok = load_tokenizer("models/gpt2")   # doctest: +SKIP
    """
    from .errors import ModelNotFoundError

    path = Path(folder)
    if not path.is_dir():
        raise ModelNotFoundError(
            f"Tokenizer folder {path} does not exist. Pass the folder that holds tokenizer.json "
            "(or vocab.json + merges.txt, or a sentencepiece model)."
        )

    def has(name: str) -> bool:
        return (path / name).is_file()

    if has("source.spm") and has("target.spm") and has("vocab.json"):
        return _load_marian(path)
    if has("tokenizer.json"):
        return _load_tokenizer_json(path)
    if has("vocab.json") and has("merges.txt"):
        return _load_vocab_merges(path)
    for name in ("spiece.model", "tokenizer.model", "sentencepiece.bpe.model"):
        if has(name):
            return _load_sentencepiece(path, path / name)

    looked_for = [
        "tokenizer.json",
        "vocab.json + merges.txt",
        "spiece.model",
        "tokenizer.model",
        "source.spm + target.spm + vocab.json",
    ]
    missing = ["tokenizer.json"]
    if has("vocab.json") and not has("merges.txt"):
        missing.append("merges.txt")
    if has("source.spm") or has("target.spm"):
        missing += [n for n in ("source.spm", "target.spm", "vocab.json") if not has(n)]
    raise ModelFilesMissingError(
        f"No tokenizer files in {path}. Looked for: {', '.join(looked_for)}. "
        "Download the tokenizer files of the model into this folder (e.g. "
        "huggingface_hub.snapshot_download(repo_id, allow_patterns=['*.json', '*.txt', '*.model', '*.spm', '*.jinja'])).",
        missing,
    )
