"""The llguidance tokenizer of a model's :class:`~inference4py.tokenization.Tokenizer`, built once and cached.

The fast back end hands its tokenizer.json to llguidance. For sentencepiece vocabularies, and for
decoders llguidance cannot read (T5's Metaspace), the token bytes are spelled here: byte-fallback
pieces ``<0xNN>`` become that byte, and ``▁`` becomes a space.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inference4py.errors import ConfigurationError

if TYPE_CHECKING:
    import llguidance

    from inference4py.tokenization import Tokenizer

from inference4py.generation.constraints.grammar import _llguidance

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_UNDERLINE = "\u2581"


_TOKENIZERS: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], Any]] = weakref.WeakKeyDictionary()
_TOKENIZERS_LOCK = threading.Lock()


def llg_tokenizer(tokenizer: Tokenizer, eos_token_ids: Sequence[int]) -> llguidance.LLTokenizer:
    """The ``llguidance.LLTokenizer`` of ``tokenizer``, built once per tokenizer object and EOS set.

    A ``tokenizers``-backed tokenizer is handed over as its ``tokenizer.json``
    (llguidance reads byte-level BPE, Metaspace and byte fallback itself); any
    other (sentencepiece) gets its token bytes built here: ``<0xNN>`` byte pieces
    become that byte, ``▁`` a space, special tokens are marked special.

    Args:
        tokenizer: The model's tokenizer.
        eos_token_ids: The ids that end generation (the generation config's);
            the constraint allows them once its text is complete.

    Raises:
        ConfigurationError: No EOS id, or llguidance is not installed.
    """
    eos = tuple(dict.fromkeys(int(i) for i in eos_token_ids)) or tuple(tokenizer.eos_token_ids)
    if not eos:
        raise ConfigurationError(
            "Constrained generation needs an EOS token id to end the output when the constraint is complete: "
            "set eos_token_id in the generation config."
        )
    with _TOKENIZERS_LOCK:
        per_tokenizer = _TOKENIZERS.setdefault(tokenizer, {})
        cached = per_tokenizer.get(eos)
        if cached is None:
            cached = per_tokenizer[eos] = _build_llg_tokenizer(tokenizer, list(eos))
    return cached


def _build_llg_tokenizer(tokenizer: Tokenizer, eos: list[int]) -> Any:
    llg = _llguidance()
    backend = getattr(tokenizer, "backend", None)
    if backend is not None and hasattr(backend, "to_str"):
        from copy import copy

        backend = copy(backend)  # padding / truncation must not reach llguidance's copy
        backend.no_padding()
        backend.no_truncation()
        try:
            return llg.LLTokenizer(backend.to_str(), n_vocab=tokenizer.vocab_size, eos_token=eos)
        except ValueError:  # a decoder llguidance cannot read (T5's Metaspace): spell the pieces ourselves
            pass
    return llg.LLTokenizer(llg.TokenizerWrapper(_PieceTokenizer(tokenizer, eos[0])), eos_token=eos)


class _PieceTokenizer:
    """What ``llguidance.TokenizerWrapper`` reads, for a sentencepiece-style vocabulary."""

    def __init__(self, tokenizer: Tokenizer, eos: int) -> None:
        self._tokenizer = tokenizer
        special = set(tokenizer.all_special_ids)
        added = getattr(tokenizer, "_added_by_id", {})
        self.eos_token_id = eos
        self.bos_token_id = tokenizer.bos_token_id
        self.special_token_ids = sorted(i for i in special if 0 <= i < tokenizer.vocab_size)
        tokens: list[bytes] = []
        self._byte_ids: list[int] = []
        for i in range(tokenizer.vocab_size):
            piece = tokenizer.id_to_token(i)
            if piece is None:
                tokens.append(b"")
            elif i in special or i in added:
                tokens.append(piece.encode("utf-8"))
            elif (byte := _BYTE_PIECE.fullmatch(piece)) is not None:
                tokens.append(bytes([int(byte.group(1), 16)]))
                self._byte_ids.append(i)
            else:
                tokens.append(piece.replace(_SPIECE_UNDERLINE, " ").encode("utf-8"))
        self.tokens = tokens
        self._special = frozenset(special) | frozenset(added)
        self._by_bytes: dict[bytes, int] | None = None
        self._longest = 1

    def _bytes(self, ids: Sequence[int]) -> bytes:
        tokens = self.tokens
        return b"".join(tokens[i] if 0 <= i < len(tokens) else b"" for i in ids)

    def __call__(self, text: bytes) -> list[int]:
        # llguidance takes these ids as the canonical tokens of ``text`` (it allows only them for
        # forced bytes), so they must spell ``text`` exactly.  sentencepiece adds a dummy "▁" in
        # front: encode after a newline and drop the newline's tokens, else match greedily.
        string = text.decode("utf-8", errors="replace")
        ids = self._tokenizer.encode(string, add_special_tokens=False)
        if self._bytes(ids) == text:
            return ids
        ids = self._tokenizer.encode("\n" + string, add_special_tokens=False)
        total = self._bytes(ids)
        if total.endswith(text):
            cut, done = len(total) - len(text), 0
            for k, i in enumerate(ids):
                if done == cut:
                    return ids[k:]
                done += len(self.tokens[i]) if 0 <= i < len(self.tokens) else 0
                if done > cut:
                    break
        return self._greedy(text)

    def _greedy(self, text: bytes) -> list[int]:
        if self._by_bytes is None:
            by_bytes: dict[bytes, int] = {}
            for i in [*(i for i in range(len(self.tokens)) if i not in self._byte_ids), *self._byte_ids]:
                tok = self.tokens[i]  # pieces first, byte-fallback pieces only for what no piece spells
                if tok and i not in self._special:
                    by_bytes.setdefault(tok, i)
            self._by_bytes = by_bytes
            self._longest = max(map(len, by_bytes), default=1)
        out: list[int] = []
        pos = 0
        while pos < len(text):
            for size in range(min(self._longest, len(text) - pos), 0, -1):
                hit = self._by_bytes.get(text[pos : pos + size])
                if hit is not None:
                    out.append(hit)
                    pos += size
                    break
            else:
                pos += 1  # a byte no token spells (no byte fallback): nothing can produce it
        return out
