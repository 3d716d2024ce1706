"""Constrained decoding: llguidance matchers -> token bitmask -> one more logits processor.

A :class:`Constraint` is compiled once from exactly one of ``json_schema``,
``json_object``, ``regex``, ``grammar`` (Lark, or an llguidance JSON grammar)
or ``choices``, against a model's tokenizer; :class:`ConstraintProcessor` is an
ordinary logits processor ``(input_ids, scores) -> scores`` that sets every
token the constraint forbids to ``-inf``.  The generation loop never changes:
greedy, sampling, beam search (rows reordered and duplicated between steps),
several samples and padded batches all work, because the processor keeps one
matcher state per *generated-token prefix* of a row and advances it by the
row's last token when it sees that row again.

The llguidance tokenizer (:func:`llg_tokenizer`) is built once per
:class:`~inference4py.tokenization.Tokenizer` object and EOS set, and cached.
``llguidance`` is imported only when a constraint is built; without it,
:class:`~inference4py.errors.ConfigurationError` names ``pip install "inference4py[structured]"``.

Example:
    >>> c = Constraint(tokenizer, eos_token_ids=(2,), regex=r"\\d{3}")  # doctest: +SKIP
    >>> proc = ConstraintProcessor(c)  # last in the processor list        # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from inference4py.errors import ConfigurationError, InvalidInputError

if TYPE_CHECKING:
    import llguidance

    from inference4py.tokenization import Tokenizer

from inference4py.generation.constraints.grammar import ConstraintKind, _invalid_message, _llguidance, compile_grammar
from inference4py.generation.constraints.tokenizer import llg_tokenizer

_NEG_INF = np.float32(-np.inf)


# ---------------------------------------------------------------------------------- constraint
class Constraint:
    """One output constraint compiled for one tokenizer: the root matcher every row starts from.

    Args:
        tokenizer: The model's tokenizer.
        eos_token_ids: The generation config's EOS ids (default: the tokenizer's).
        json_schema, json_object, regex, grammar, choices: exactly one; see
            :func:`compile_grammar`.

    Raises:
        ConfigurationError: None or several options, an invalid schema / regex /
            grammar, empty choices, no EOS id, llguidance missing.

    Example:
        >>> c = Constraint(tok, choices=["red", "green", "blue"])  # doctest: +SKIP
        >>> c.is_complete(tok.encode("red", add_special_tokens=False))  # doctest: +SKIP
        True
    """

    __slots__ = ("kind", "grammar", "eos_token_ids", "_llg_tokenizer", "_root")

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        eos_token_ids: Sequence[int] | None = None,
        json_schema: Mapping[str, Any] | str | None = None,
        json_object: bool = False,
        regex: str | None = None,
        grammar: str | None = None,
        choices: Sequence[str] | None = None,
    ) -> None:
        compiled = compile_grammar(
            json_schema=json_schema, json_object=json_object, regex=regex, grammar=grammar, choices=choices
        )
        if compiled is None:
            raise ConfigurationError(
                "A Constraint needs one of json_schema, json_object=True, regex, grammar or choices."
            )
        self._start(tokenizer, compiled[0], compiled[1], eos_token_ids)

    @classmethod
    def from_grammar(
        cls, tokenizer: Tokenizer, kind: ConstraintKind, grammar: str, *, eos_token_ids: Sequence[int] | None = None
    ) -> Constraint:
        """A constraint over a grammar :func:`compile_grammar` already returned (nothing compiled again)."""
        constraint = cls.__new__(cls)
        constraint._start(tokenizer, kind, grammar, eos_token_ids)
        return constraint

    def _start(
        self, tokenizer: Tokenizer, kind: ConstraintKind, grammar: str, eos_token_ids: Sequence[int] | None
    ) -> None:
        self.kind: ConstraintKind = kind
        self.grammar: str = grammar
        lt = llg_tokenizer(tokenizer, () if eos_token_ids is None else eos_token_ids)
        self._llg_tokenizer = lt
        self.eos_token_ids: frozenset[int] = frozenset(int(i) for i in lt.eos_tokens)
        root = _llguidance().LLMatcher(lt, self.grammar, log_level=0)
        if root.is_error():
            raise ConfigurationError(_invalid_message(self.kind, root.get_error()))
        self._root = root

    @property
    def vocab_size(self) -> int:
        """Tokens the constraint knows (the tokenizer's); ids above it are never allowed."""
        return int(self._llg_tokenizer.vocab_size)

    def new_matcher(self) -> llguidance.LLMatcher:
        """A fresh matcher at the start of the output."""
        return self._root.deep_copy()

    def is_complete(self, token_ids: Iterable[int]) -> bool:
        """Whether ``token_ids`` (the generated ids, EOS included or not) form a complete output.

        True when every token was allowed and the text up to the first EOS is a
        whole match of the constraint; False for an output cut off inside it
        (``max_new_tokens`` ran out) or one the constraint did not produce.
        """
        state = _advance(_State(self.new_matcher()), (int(t) for t in token_ids), self.eos_token_ids)
        return state.complete

    def __repr__(self) -> str:
        return f"Constraint(kind={self.kind!r}, vocab_size={self.vocab_size})"


class _State:
    """A row's matcher after its generated prefix; ``ended`` once EOS (or a refused token) went by."""

    __slots__ = ("matcher", "ended", "complete")

    def __init__(self, matcher: Any, *, ended: bool = False, complete: bool = False) -> None:
        self.matcher = matcher
        self.ended = ended
        self.complete = complete  # meaningful once ended; else the matcher says

    def after(self, token: int, eos: frozenset[int], *, copy: bool) -> _State:
        if self.ended:
            return self
        if token in eos:
            return _State(None, ended=True, complete=bool(self.matcher.is_accepting()))
        matcher = self.matcher.deep_copy() if copy else self.matcher
        if not matcher.consume_token(token):
            return _State(None, ended=True, complete=False)
        return _State(matcher)


def _advance(state: _State, tokens: Iterable[int], eos: frozenset[int]) -> _State:
    for token in tokens:
        state = state.after(token, eos, copy=False)
        if state.ended:
            return state
    return _State(None, ended=True, complete=bool(state.matcher.is_accepting()))


# ---------------------------------------------------------------------------------- processor
class ConstraintProcessor:
    """Logits processor that forbids every token a constraint does not allow.

    Put it last in the processor list (after penalties, min-new-tokens...).  It
    keeps each row's matcher keyed by the row's generated ids, so it follows
    whatever the search does between calls: beams reordered or duplicated,
    rows expanded for several samples, padded batches.  A row past its EOS (a
    finished row fed padding) is left alone.  When every token the constraint
    allows was already ``-inf`` (e.g. min_new_tokens banning the EOS that
    would close a complete output) the constraint wins: its allowed tokens get
    score 0.

    Args:
        constraints: One :class:`Constraint` for every row, or one per batch row
            (None: that row is free).  With ``num_beams`` or ``num_return_sequences``
            > 1 the search has ``len(constraints) * k`` rows, batch-row major, and
            each row uses its batch row's constraint.
        prompt_length: Where the generated ids start in ``input_ids`` (the padded
            prompt width; 1 for an encoder-decoder's start token).  None: the
            width of ``input_ids`` at the first call, which is the same thing.

    One processor serves one generation call; :meth:`reset` makes it reusable.
    """

    def __init__(
        self,
        constraints: Constraint | Sequence[Constraint | None],
        *,
        prompt_length: int | None = None,
    ) -> None:
        if isinstance(constraints, Constraint):
            per_row: tuple[Constraint | None, ...] = (constraints,)
        else:
            per_row = tuple(constraints)
            if not per_row:
                raise ConfigurationError("ConstraintProcessor needs a Constraint, or a list with one per row.")
            for c in per_row:
                if c is not None and not isinstance(c, Constraint):
                    raise ConfigurationError(f"Expected Constraint or None per row, got {type(c).__name__}.")
        if prompt_length is not None and (not isinstance(prompt_length, int) or prompt_length < 0):
            raise ConfigurationError(f"prompt_length must be a non-negative int, got {prompt_length!r}.")
        self._constraints = per_row
        self._initial_prompt_length = prompt_length
        self._prompt_length = prompt_length
        self._states: dict[tuple[int, bytes], _State] = {}
        self._bitmask = np.empty((0, 0), dtype=np.int32)
        self._executor: Any = None

    @property
    def constraints(self) -> tuple[Constraint | None, ...]:
        return self._constraints

    def reset(self) -> None:
        """Forget every row's state (a new generation call)."""
        self._prompt_length = self._initial_prompt_length
        self._states = {}

    def _constraint_index(self, row: int, batch: int) -> int:
        n = len(self._constraints)
        if n == 1:
            return 0
        if batch % n:
            raise InvalidInputError(
                f"{n} constraints for a batch of {batch} rows: give one constraint for all rows, or one per prompt."
            )
        return row // (batch // n)

    def is_complete(self, token_ids: Iterable[int], *, row: int = 0) -> bool:
        """Whether ``token_ids`` (one row's generated ids) form a complete output of that row's constraint.

        Args:
            token_ids: The generated ids of one output (EOS included or not).
            row: Its batch row (the prompt's index), for per-row constraints.

        Returns:
            True when the output is a whole match; always True for a free row.
        """
        n = len(self._constraints)
        constraint = self._constraints[0 if n == 1 else row]
        return True if constraint is None else constraint.is_complete(token_ids)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        batch, cur = input_ids.shape
        if self._prompt_length is None:
            self._prompt_length = cur
        start = self._prompt_length
        if cur < start:
            raise InvalidInputError(
                f"ConstraintProcessor got {cur} ids but the prompt has {start}: use one processor per "
                "generation call (or reset() it)."
            )
        generated = input_ids[:, start:]  # [batch, new]
        old, new = self._states, {}
        keys: list[tuple[int, bytes] | None] = []
        todo: dict[tuple[int, bytes], int] = {}
        for r in range(batch):
            ci = self._constraint_index(r, batch)
            if self._constraints[ci] is None:
                keys.append(None)
                continue
            key = (ci, generated[r].tobytes())
            keys.append(key)
            if key in new or key in todo:
                continue
            state = old.get(key)
            if state is not None:
                new[key] = state
            else:
                todo[key] = r
        if todo:
            width = generated.dtype.itemsize
            uses = Counter((ci, kb[:-width]) for ci, kb in todo)
            for key, r in todo.items():
                ci, kb = key
                constraint = self._constraints[ci]
                assert constraint is not None  # free rows were skipped above
                eos = constraint.eos_token_ids
                parent_key = (ci, kb[:-width])
                parent = old.get(parent_key) if kb else None
                if parent is None:  # first step, or a jump: replay the whole prefix
                    state = _State(constraint.new_matcher())
                    for token in generated[r].tolist():
                        state = state.after(int(token), eos, copy=False)
                else:
                    state = parent.after(int(generated[r, -1]), eos, copy=uses[parent_key] > 1)
                new[key] = state
        self._states = new
        self._mask(keys, scores)
        return scores

    def _mask(self, keys: list[tuple[int, bytes] | None], scores: np.ndarray) -> None:
        # One bitmask row per distinct live state (beams often share one).
        slot: dict[int, int] = {}
        matchers: list[tuple[Any, int]] = []
        rows: list[int] = []
        slots: list[int] = []
        for r, key in enumerate(keys):
            if key is None:
                continue
            state = self._states[key]
            if state.ended:
                continue
            s = slot.get(id(state))
            if s is None:
                s = slot[id(state)] = len(matchers)
                matchers.append((state.matcher, s))
            rows.append(r)
            slots.append(s)
        if not rows:
            return
        vocab = scores.shape[1]
        # every constraint of a processor is compiled for the same model: one vocabulary
        known = next(c for c in self._constraints if c is not None).vocab_size
        words = (known + 31) // 32
        if self._bitmask.shape[0] < len(matchers) or self._bitmask.shape[1] != words:
            self._bitmask = np.empty((max(len(matchers), self._bitmask.shape[0]), words), dtype=np.int32)
        bitmask = self._bitmask
        if len(matchers) == 1:
            matchers[0][0].unsafe_compute_mask_ptr(bitmask.ctypes.data, words * 4)
        else:
            if self._executor is None:
                self._executor = _llguidance().LLExecutor()
            self._executor.unsafe_compute_mask_ptr(matchers, bitmask.ctypes.data, words * 4, bitmask.shape[0])
        width = min(vocab, known)
        # [n_states, width] 1 = allowed; little bit order: bit i of word j is token 32 * j + i
        allowed = np.unpackbits(bitmask[: len(matchers)].view(np.uint8), axis=1, count=width, bitorder="little")
        if len(rows) == scores.shape[0] and len(matchers) == 1:  # the common case: one state for every row
            np.copyto(scores[:, :width], _NEG_INF, where=allowed[0] == 0)
            if vocab > width:
                scores[:, width:] = _NEG_INF
            dead = np.flatnonzero(np.isneginf(scores.max(axis=1)))
            for row in dead:
                scores[row, :width][allowed[0] == 1] = np.float32(0.0)
            return
        row_idx = np.asarray(rows, dtype=np.intp)
        row_allowed = allowed[np.asarray(slots, dtype=np.intp)]  # [rows, width]
        sub = scores[row_idx, :width]
        np.copyto(sub, _NEG_INF, where=row_allowed == 0)
        if vocab > width:
            scores[row_idx, width:] = _NEG_INF
        # Rows left with no finite score (e.g. min_new_tokens banned the EOS that closes a complete
        # output): the constraint wins, its allowed tokens get score 0.
        for i in np.flatnonzero(np.isneginf(sub.max(axis=1))):
            sub[i, row_allowed[i] == 1] = np.float32(0.0)
        scores[row_idx, :width] = sub

    def __repr__(self) -> str:
        kinds = ", ".join("free" if c is None else c.kind for c in self._constraints)
        return f"ConstraintProcessor([{kinds}], prompt_length={self._prompt_length})"
