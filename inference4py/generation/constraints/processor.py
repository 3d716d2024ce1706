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

import json
import re
import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from inference4py.errors import ConfigurationError, InvalidInputError

if TYPE_CHECKING:
    import llguidance

    from inference4py.tokenization import Tokenizer

__all__ = [
    "ConstraintKind",
    "Constraint",
    "ConstraintProcessor",
    "compile_grammar",
    "llg_tokenizer",
]

ConstraintKind = Literal["json_schema", "json_object", "regex", "grammar", "choices"]

_INSTALL = 'pip install "inference4py[structured]"'
_NEG_INF = np.float32(-np.inf)
# JSON output without free whitespace: a model (a random one above all) cannot wander into
# endless spaces and newlines.  A schema's own "x-guidance" options override these.
_JSON_DEFAULTS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_UNDERLINE = "\u2581"


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as exc:
        raise ConfigurationError(
            "Structured output (json_schema, json_object, regex, grammar, choices) needs the llguidance package: "
            f"{_INSTALL} (or pip install llguidance)."
        ) from exc
    return llguidance


# ---------------------------------------------------------------------------------- grammars
def compile_grammar(
    *,
    json_schema: Mapping[str, Any] | str | None = None,
    json_object: bool = False,
    regex: str | None = None,
    grammar: str | None = None,
    choices: Sequence[str] | None = None,
) -> tuple[ConstraintKind, str] | None:
    """Check the constraint options and compile them into one llguidance grammar.

    Needs no tokenizer, so a configuration can be validated before a model is loaded.

    Args:
        json_schema: A JSON Schema, as a dict or a JSON string.
        json_object: Any JSON object (OpenAI's ``response_format={"type": "json_object"}``).
        regex: A regular expression the whole output must match (Rust ``regex`` syntax,
            which is Python's for the common cases; no look-around or backreferences).
        grammar: A Lark grammar (llguidance's dialect, rule ``start``), or an
            llguidance JSON grammar (``{"grammars": [...]}``).
        choices: The output is exactly one of these strings.

    Returns:
        ``(kind, grammar)``, or None when no option is set.

    Raises:
        ConfigurationError: Two options at once, an invalid schema, regex or
            grammar, empty choices; or llguidance is not installed.
    """
    given: list[ConstraintKind] = []
    if json_schema is not None:
        given.append("json_schema")
    if json_object:
        given.append("json_object")
    if regex is not None:
        given.append("regex")
    if grammar is not None:
        given.append("grammar")
    if choices is not None:
        given.append("choices")
    if not given:
        return None
    if len(given) > 1:
        raise ConfigurationError(
            f"Only one output constraint at a time, got {', '.join(given)}: keep one of them "
            "(a JSON schema can express choices and patterns too)."
        )
    kind = given[0]
    llg = _llguidance()
    matcher = llg.LLMatcher
    if kind == "json_schema":
        schema = _schema_dict(json_schema)
        try:
            compiled = matcher.grammar_from_json_schema(schema, defaults=_JSON_DEFAULTS)
        except ValueError as exc:
            raise ConfigurationError(f"json_schema is not a valid JSON Schema ({exc}). Fix the schema.") from exc
    elif kind == "json_object":
        compiled = matcher.grammar_from_json_schema({"type": "object"}, defaults=_JSON_DEFAULTS)
    elif kind == "regex":
        if not isinstance(regex, str) or not regex:
            raise ConfigurationError(f"regex must be a non-empty string, got {regex!r}.")
        compiled = matcher.grammar_from_regex(regex)
    elif kind == "grammar":
        compiled = _grammar_text(grammar)
    else:
        compiled = matcher.grammar_from_lark(_choices_lark(choices))
    error = matcher.validate_grammar(compiled)
    if error:
        raise ConfigurationError(_invalid_message(kind, error))
    return kind, compiled


def _schema_dict(schema: Any) -> dict[str, Any]:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"json_schema is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}). "
                "Pass a dict, or a JSON string of the schema."
            ) from exc
    if isinstance(schema, bool):  # true / false are valid schemas: anything / nothing
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, Mapping):
        raise ConfigurationError(
            f"json_schema must be a JSON object (a dict), got {type(schema).__name__}. "
            'Example: {"type": "object", "properties": {"name": {"type": "string"}}}.'
        )
    return dict(schema)


def _grammar_text(grammar: Any) -> str:
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConfigurationError(f"grammar must be a non-empty Lark grammar string, got {grammar!r}.")
    stripped = grammar.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "grammars" in data:
            return grammar  # already an llguidance JSON grammar
    matcher: Any = _llguidance().LLMatcher
    return str(matcher.grammar_from_lark(grammar))


def _choices_lark(choices: Any) -> str:
    if isinstance(choices, str) or not isinstance(choices, Iterable):
        raise ConfigurationError(f"choices must be a list of strings, got {choices!r}.")
    items = list(choices)
    if not items:
        raise ConfigurationError("choices is empty: give at least one string the output may be.")
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigurationError(f"choices must be non-empty strings, got {item!r}.")
    # JSON string escapes are valid Lark string literals.
    return "start: " + " | ".join(json.dumps(item) for item in dict.fromkeys(items))


def _invalid_message(kind: ConstraintKind, error: str) -> str:
    detail = error.strip()
    if len(detail) > 600:
        detail = detail[:600] + " ..."
    fix = {
        "json_schema": "Fix the JSON schema (llguidance supports JSON Schema draft 2020-12's common keywords).",
        "json_object": "This is a bug: please report it.",
        "regex": "Fix the regular expression (Rust regex syntax: no look-around, no backreferences).",
        "grammar": "Fix the grammar (Lark syntax as llguidance reads it, with a `start` rule).",
        "choices": "Check the choice strings.",
    }[kind]
    return f"Invalid {kind} constraint: {detail}\n{fix}"


# ---------------------------------------------------------------------------------- tokenizer adapter
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
        self.kind: ConstraintKind = compiled[0]
        self.grammar: str = compiled[1]
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
