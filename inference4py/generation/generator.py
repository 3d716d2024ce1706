"""The step-level Generator, mirroring onnxruntime-genai's ``og.Generator``.

Under the task classes there is always a loop of "feed tokens, get logits, pick
a token".  ``Generator`` exposes that loop one step at a time over any engine
state (decoder-only or encoder-decoder)::

    g = text_generator.generator(max_new_tokens=20)
    g.append_tokens(prompt_ids)
    while not g.is_done():
        g.generate_next_token()
    print(g.sequence(0))

It also supports editing the logits (``get_logits`` / ``set_logits``) and
rewinding (``rewind_to``): the KV cache is trimmed, so a conversation can keep
its cache across turns and only prefill the new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inference4py.errors import InvalidInputError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.processors import LogitsProcessor, apply_processors, make_logits_processors
from inference4py.generation.sampling import choose_token, make_rng, make_sampler
from inference4py.generation.search import sequence_finished

__all__ = ["Generator"]


class Generator:
    """Token-by-token generation over one engine state (batch of one).

    Args:
        state: a fresh engine state (``DecoderState`` or ``Seq2SeqState``) with
            ``prefill``, ``step`` and ``rewind``.
        config: generation settings (``max_new_tokens`` counts tokens generated
            since the last ``append_tokens``; EOS ids end generation).
        extra_processors: user logits processors, applied after the built-in ones.
        start_tokens: tokens already part of the sequence before any append
            (encoder-decoder models: the decoder start token).
    """

    def __init__(
        self,
        state: Any,
        config: GenerationConfig,
        *,
        extra_processors: Sequence[LogitsProcessor] = (),
        start_tokens: Sequence[int] = (),
    ) -> None:
        self._state = state
        self._extra = tuple(extra_processors)
        self.set_config(config)
        self._ids: list[int] = []  # the whole sequence (prompt + generated)
        self._fed = 0  # how many of _ids are in the KV cache
        self._logits: np.ndarray | None = None  # next-token logits for the sequence as fed
        self._turn_start = 0  # where the current turn's generation began
        self._processors: list[LogitsProcessor] = []
        if start_tokens:
            self.append_tokens(start_tokens)

    def set_config(self, config: GenerationConfig) -> None:
        """Use other settings from the next token on (e.g. a new turn's max_new_tokens)."""
        self.config = config
        self._sampler = make_sampler(config)
        self._rng = make_rng(config.seed)
        self._eos = frozenset(config.eos_token_id)
        if getattr(self, "_ids", None) is not None:
            self._processors = make_logits_processors(config, prompt_length=max(self._turn_start, 1), extra=self._extra)

    # ------------------------------------------------------------------ feeding
    def append_tokens(self, token_ids: Sequence[int]) -> None:
        """Add tokens to the sequence (a prompt, a user turn, forced text) and run them through the model."""
        ids = [int(t) for t in token_ids]
        if not ids:
            raise InvalidInputError("append_tokens needs at least one token id.")
        self._ids.extend(ids)
        self._feed()
        self._turn_start = len(self._ids)
        self._processors = make_logits_processors(self.config, prompt_length=self._turn_start, extra=self._extra)

    def _feed(self) -> None:
        pending = self._ids[self._fed :]
        if not pending:
            return
        arr = np.asarray([pending], dtype=np.int64)  # [1, n]
        if self._fed == 0 or len(pending) > 1:
            self._logits = self._state.prefill(arr)
        else:
            self._logits = self._state.step(arr[:, 0])
        self._fed = len(self._ids)

    # ------------------------------------------------------------------ stepping
    def generate_next_token(self) -> int:
        """Choose the next token from the (processed) logits and append it. Returns the token."""
        if not self._ids:
            raise InvalidInputError("Call append_tokens(prompt_ids) before generate_next_token().")
        if self.is_done():
            raise InvalidInputError(
                "Generation is done (EOS or max_new_tokens reached); append tokens or rewind first."
            )
        ids = np.asarray([self._ids], dtype=np.int64)  # [1, cur_len]
        scores = apply_processors(self._processors, ids, self.get_logits())
        token = choose_token(self._sampler, scores, self._rng, step=len(self._ids) - self._turn_start)
        self._ids.append(token)
        self._logits = None  # computed lazily: the last token is fed only if needed
        return token

    def is_done(self) -> bool:
        """True after an EOS token or once max_new_tokens were generated in this turn."""
        generated = len(self._ids) - self._turn_start
        if generated <= 0:
            return False
        return sequence_finished(self._ids[-1], generated, self._eos, self.config.max_new_tokens)

    # ------------------------------------------------------------------ inspection
    @property
    def next_tokens(self) -> list[int]:
        """The last token of each sequence (batch of one: a one-element list)."""
        return [self._ids[-1]] if self._ids else []

    def sequence(self, index: int = 0) -> list[int]:
        """All token ids of sequence ``index`` (prompt and generated)."""
        if index != 0:
            raise InvalidInputError(f"This generator has one sequence; sequence({index}) does not exist.")
        return list(self._ids)

    def get_logits(self) -> np.ndarray:
        """Next-token logits ``[1, vocab]`` (float32, a copy you may keep)."""
        if self._logits is None:
            self._feed()
        assert self._logits is not None
        return np.array(self._logits, dtype=np.float32, copy=True)

    def set_logits(self, logits: np.ndarray) -> None:
        """Replace the next-token logits (custom constraints); the shape must not change."""
        current = self.get_logits()
        new = np.asarray(logits, dtype=np.float32)
        if new.shape != current.shape:
            raise InvalidInputError(f"set_logits expects shape {current.shape}, got {new.shape}.")
        self._logits = new.copy()

    # ------------------------------------------------------------------ rewind
    def rewind_to(self, length: int) -> None:
        """Keep the first ``length`` tokens and forget the rest, KV cache included.

        Continuing afterwards gives the same ids as generating from that prefix afresh; with an int8
        KV cache (``kv_cache("int8")``) only close to them, because a fresh prompt runs on the float
        twin (:mod:`inference4py.engine.float_prompt`) while the kept cache went through int8.
        """
        if not 0 <= length <= len(self._ids):
            raise InvalidInputError(f"Cannot rewind to {length}: the sequence has {len(self._ids)} tokens.")
        del self._ids[length:]
        if length == 0:
            self._state.rewind(0)
            self._fed = 0
            self._logits = None
        else:
            # Keep length-1 tokens cached and re-feed the last one to get its logits back.
            keep = min(self._fed, length - 1)
            self._state.rewind(keep)
            self._fed = keep
            self._logits = None
        self._turn_start = min(self._turn_start, length)
        self._processors = make_logits_processors(
            self.config, prompt_length=max(self._turn_start, 1), extra=self._extra
        )
