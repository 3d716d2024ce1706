"""Streaming text out of a token stream: incremental detokenization and stop strings.

:class:`IncrementalDetokenizer` turns token ids into text pieces as soon as the
text is final.  Its invariant: the concatenation of every piece returned by
:meth:`~IncrementalDetokenizer.add` and :meth:`~IncrementalDetokenizer.finish`
equals ``tokenizer.decode(ids, skip_special_tokens=...)`` exactly, and no piece
carries a U+FFFD made by a multi-byte character split across tokens.

It works for any :class:`~inference4py.tokenization.Tokenizer` with one
algorithm (the prefix/read offsets of HF's ``TextStreamer`` and vLLM's
``detokenize_incrementally``): each step decodes only a small window of recent
tokens, and text is emitted only at token boundaries where the window's
decoding is stable:

* a window whose text ends in U+FFFD waits (a multi-byte character is incomplete);
* a window whose text does not extend the text of its already-emitted tokens
  waits (the decoder changed earlier text, e.g. a sentencepiece ``strip``);
* with ``clean_up_tokenization_spaces`` (which rewrites ``" ."`` into ``"."``,
  ``" n't"`` into ``"n't"``...), a window ending with the start of such a
  pattern waits until the pattern is decided.

The window starts at the token boundary of the previous emission, so decoders
that treat the first token specially (Metaspace / sentencepiece drop its
leading space) treat the same token specially in both decodes.  The cost per
token is a decode of a few tokens, never of the whole sequence.

Tokenizers of the ``tokenizers`` library run the same algorithm natively
(``tokenizers.decoders.DecodeStream``, one call per token) when no clean-up,
no special-token holding and no kept special tokens are asked for; the window code above stays the
always-correct fallback, and takes over for the rest of a stream whenever the
native decoder refuses text (it raises where the window code waits).

:class:`StopSequenceMatcher` cuts a text stream at the first stop string, even
when the stop string arrives split across any number of pieces, and never lets
any part of it out.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, InvalidInputError
from ..tokenization import clean_up_tokenization

if TYPE_CHECKING:
    from ..tokenization import Tokenizer

__all__ = ["IncrementalDetokenizer", "StopSequenceMatcher"]

_REPLACEMENT = "\ufffd"
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")
# Text ending with one of these may still be rewritten by transformers'
# clean_up_tokenization (its patterns: " .", " ?", " !", " ,", " ' ", " n't",
# " 'm", " 's", " 've", " 're"); they are the proper prefixes of those patterns.
_CLEANUP_OPEN_TAILS = (" ", " '", " n", " n'", " 'v", " 'r")

# IncrementalDetokenizer._holds per token id, shared by every stream over one tokenizer
# (a stream is short: a cache of its own would be refilled by every generation call).
_HOLD_CACHES: weakref.WeakKeyDictionary[Any, dict[Hashable, dict[int, bool]]] = weakref.WeakKeyDictionary()
_HOLD_CACHE_SIZE = 65536


def _hold_cache(tokenizer: Any, decoding: Hashable) -> dict[int, bool]:
    try:
        per_decoding = _HOLD_CACHES.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable: a cache for this stream only
        return {}
    return per_decoding.setdefault(decoding, {})


class IncrementalDetokenizer:
    """Decode a growing sequence of token ids into text pieces, UTF-8 safe.

    Args:
        tokenizer: The model's tokenizer.
        skip_special_tokens: As in ``tokenizer.decode``.
        prompt_ids: Ids that precede the generated ones.  The last few are used
            as context only (never emitted), so the first generated token is
            decoded as it reads after the prompt (e.g. its leading space is kept
            by sentencepiece decoders).  The pieces then equal
            ``decode(context + ids)`` minus ``decode(context)``.  Without it,
            they equal ``decode(ids)``.
        context_tokens: How many trailing prompt ids to keep as context.
        keep: Ids of special tokens that stay in the text although ``skip_special_tokens`` drops the
            others, each as its vocabulary entry (the markers of a turn format such as Harmony's, which
            the text is split by); the pieces then equal ``decode`` of the runs between them, with them
            in place.

    Example:
        >>> detok = IncrementalDetokenizer(tokenizer)       # doctest: +SKIP
        >>> for token_id in generated:                       # doctest: +SKIP
        ...     print(detok.add(token_id), end="")
        >>> print(detok.finish())                            # doctest: +SKIP
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        skip_special_tokens: bool = True,
        prompt_ids: Sequence[int] | None = None,
        context_tokens: int = 4,
        keep: Collection[int] = (),
    ) -> None:
        if context_tokens < 1:
            raise ConfigurationError(f"context_tokens must be >= 1, got {context_tokens}.")
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        kept = frozenset(int(i) for i in keep) if skip_special_tokens else frozenset()
        self._kept = {i: tokenizer.id_to_token(i) or "" for i in kept}
        self._cleanup = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
        self._hold_until_special = not skip_special_tokens and bool(
            getattr(tokenizer, "_stream_hold_until_special", False)
        )
        self._special_ids = frozenset(tokenizer.all_special_ids) if self._hold_until_special else frozenset()
        context = [int(i) for i in (prompt_ids or [])][-context_tokens:]
        self._ids: list[int] = list(context)
        self._start = len(context)
        # ids[prefix:read] were emitted and are re-decoded as context;
        # ids[read:] are waiting.
        self._prefix = 0
        self._read = len(context)
        self._prefix_text = self._decode(0, len(context))
        self._context_text = self._prefix_text
        self._pieces: list[str] = []
        self._finished = False
        self._hold_cache = _hold_cache(tokenizer, (skip_special_tokens, kept))
        # The native decoder (see the module docstring), fed every id up to _fed.  While it
        # runs, _prefix and _read follow its window and _prefix_text is left stale.  Its
        # window starts after the context only when the context's text is final.
        self._native: Callable[[int | list[int]], str | None] | None = None
        settled = not context or (self._prefix_text != "" and not self._prefix_text.endswith(_REPLACEMENT))
        if settled and not self._cleanup and not self._hold_until_special and not self._kept:
            opener = getattr(tokenizer, "_native_decode_stream", None)
            if opener is not None:
                self._native = opener(context, skip_special_tokens=skip_special_tokens)
        self._fed = len(self._ids)

    def _holds(self, token_id: int) -> bool:
        """True when text cannot be final right after ``token_id``.

        Byte-fallback decoders turn a whole run of ``<0xXX>`` tokens into U+FFFDs
        when the run is not valid UTF-8, so a run is final only once a token
        with text ends it; a token that decodes to nothing (e.g. a skipped
        special token) does not end it.
        """
        hold = self._hold_cache.get(token_id)
        if hold is None:
            piece = self._tokenizer.id_to_token(token_id)
            hold = (piece is not None and piece != "" and _BYTE_PIECE.fullmatch(piece) is not None) or (
                self._decode_ids([token_id]) == ""
            )
            if len(self._hold_cache) < _HOLD_CACHE_SIZE:
                self._hold_cache[token_id] = hold
        return hold

    def _decode(self, start: int, stop: int | None = None) -> str:
        return self._decode_ids(self._ids[start:stop])

    def _decode_ids(self, ids: list[int]) -> str:
        # Raw text (no clean-up): the clean-up is applied to each emitted piece,
        # cut where no clean-up pattern can straddle two pieces.
        if not ids:
            return ""
        if self._kept and not self._kept.keys().isdisjoint(ids):
            return self._decode_keeping(ids)
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip, clean_up_tokenization_spaces=False)

    def _decode_keeping(self, ids: list[int]) -> str:
        # the runs between kept tokens decoded as usual, each kept token as its vocabulary entry
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self._kept:
                if run:
                    parts.append(self._decode_ids(run))
                    run = []
                parts.append(self._kept[i])
            else:
                run.append(i)
        if run:
            parts.append(self._decode_ids(run))
        return "".join(parts)

    def _emit(self, raw: str) -> str:
        piece = clean_up_tokenization(raw) if self._cleanup else raw
        if piece:
            self._pieces.append(piece)
        return piece

    @property
    def token_ids(self) -> list[int]:
        """The ids added so far (without the prompt context)."""
        return self._ids[self._start :]

    @property
    def text(self) -> str:
        """The text emitted so far."""
        return "".join(self._pieces)

    def add(self, token_id: int) -> str:
        """Add one generated id; return the text it completed (often ``""``).

        Raises:
            InvalidInputError: After :meth:`finish`.
        """
        if self._finished:
            raise InvalidInputError("This detokenizer is finished; create a new one for a new sequence.")
        token_id = int(token_id)
        self._ids.append(token_id)
        if self._hold_until_special and token_id not in self._special_ids:
            return ""
        hold = self._hold_cache.get(token_id)  # (the cached case of _holds, inline: once per token)
        if hold or (hold is None and self._holds(token_id)):
            return ""
        if self._native is not None:
            return self._add_native()
        return self._add_window()

    def _add_native(self) -> str:
        native = self._native
        assert native is not None  # add() calls this only with a native stream
        ids = self._ids
        pending = ids[self._fed :] if len(ids) - self._fed > 1 else ids[-1]  # held ids go in with this one
        try:
            raw = native(pending)
        except Exception:  # whatever it refuses, the window code handles
            self._native = None
            self._prefix_text = self._decode(self._prefix, self._read)
            return self._add_window()
        self._fed = len(ids)
        if raw is None:
            return ""
        self._prefix = self._read  # the native window moved on: follow it
        self._read = len(ids)
        if raw:
            self._pieces.append(raw)  # (no clean-up with a native decoder)
        return raw

    def _add_window(self) -> str:
        text = self._decode(self._prefix)
        prefix_text = self._prefix_text
        if len(text) <= len(prefix_text) or not text.startswith(prefix_text):
            return ""
        if text.endswith(_REPLACEMENT):
            return ""
        if self._cleanup and text.endswith(_CLEANUP_OPEN_TAILS):
            return ""
        raw = text[len(prefix_text) :]
        if not (self._hold_until_special and self._ids[self._read] in self._special_ids):
            # (in hold-until-special mode, never start a window on a special
            # token: the slow Llama decode treats a leading special one specially)
            self._prefix = self._read
        self._read = len(self._ids)
        self._prefix_text = self._decode(self._prefix, self._read)
        return self._emit(raw)

    def add_many(self, token_ids: Iterable[int]) -> str:
        """:meth:`add` for several ids; returns the joined text."""
        return "".join(self.add(t) for t in token_ids)

    def finish(self) -> str:
        """Return the text still held back (an incomplete character at the end is
        decoded as the tokenizer does, usually as U+FFFD).  Idempotent."""
        if self._finished:
            return ""
        self._finished = True
        if self._native is not None:
            self._native = None
            self._prefix_text = self._decode(self._prefix, self._read)
        text = self._decode(self._prefix)
        if text.startswith(self._prefix_text):
            return self._emit(text[len(self._prefix_text) :])
        # The decoder rewrote text across the window boundary: fall back to one
        # full decode and emit whatever follows what was already emitted.
        full = self._decode(0)
        if self._start and full.startswith(self._context_text):
            full = full[len(self._context_text) :]
        elif self._start:
            full = self._decode(self._start)
        if self._cleanup:
            full = clean_up_tokenization(full)
        emitted = self.text
        return self._emit_clean(full[len(emitted) :] if full.startswith(emitted) else "")

    def _emit_clean(self, piece: str) -> str:
        if piece:
            self._pieces.append(piece)
        return piece


class StopSequenceMatcher:
    """Cut a stream of text pieces at the first stop string.

    :meth:`push` holds back any tail that could be the start of a stop string,
    so a stop string split across pieces is still caught and none of it is
    ever returned.

    Args:
        stop_sequences: Non-empty strings; an empty collection passes text through.

    Raises:
        ConfigurationError: A stop string is empty or not a string.

    Example:
        >>> m = StopSequenceMatcher(["\\nUser:"])
        >>> m.push("Hi!\\nUs")
        ('Hi!', False)
        >>> m.push("er: more")
        ('', True)
    """

    def __init__(self, stop_sequences: Iterable[str]) -> None:
        if isinstance(stop_sequences, str):
            stop_sequences = [stop_sequences]
        stops: list[str] = []
        for s in stop_sequences:
            if not isinstance(s, str) or not s:
                raise ConfigurationError(
                    f"Stop sequences must be non-empty strings, got {s!r}. Remove it from stop_sequences."
                )
            if s not in stops:
                stops.append(s)
        self._stops = tuple(stops)
        self._prefixes = frozenset(s[:k] for s in stops for k in range(1, len(s)))
        self._max_hold = max((len(s) - 1 for s in stops), default=0)
        self._held = ""
        self._stopped = False
        self._matched: str | None = None

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        return self._stops

    @property
    def stopped(self) -> bool:
        """True once a stop string was found."""
        return self._stopped

    @property
    def matched(self) -> str | None:
        """The stop string that matched, if any."""
        return self._matched

    def push(self, text: str) -> tuple[str, bool]:
        """Add a piece of text.

        Returns:
            ``(safe_text, stopped)``: the text that can be shown now, and whether
            a stop string was reached (``safe_text`` then ends right before it;
            later pushes return ``("", True)``).
        """
        if self._stopped:
            return "", True
        if not self._stops:
            return text, False
        buf = self._held + text
        best = -1
        for s in self._stops:
            i = buf.find(s)
            if i != -1 and (best == -1 or i < best or (i == best and len(s) > len(self._matched or ""))):
                best = i
                self._matched = s
        if best != -1:
            self._stopped = True
            self._held = ""
            return buf[:best], True
        hold = 0
        for k in range(min(len(buf), self._max_hold), 0, -1):
            if buf[-k:] in self._prefixes:
                hold = k
                break
        self._held = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        """Return the held-back tail at the end of the stream (``""`` after a stop)."""
        held, self._held = self._held, ""
        return "" if self._stopped else held
