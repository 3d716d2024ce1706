"""Whisper's vocabulary: its languages, its tasks and the special ids of one model folder.

* :func:`language_code`: the languages Whisper knows (:data:`WHISPER_LANGUAGES`, kept with the
  rest of Whisper's token layout in files/vocabulary.py), by code or English name
  (``"fr"``, ``"french"``, ``"<|fr|>"``, a :class:`Language`);
* :class:`WhisperVocab`: ``<|startoftranscript|>``, ``<|endoftext|>``, ``<|notimestamps|>``,
  the language and task tokens and the suppress lists, read from generation_config.json and
  the tokenizer, the way transformers' ``WhisperForConditionalGeneration.generate`` finds them;
  and the timestamp tokens, found by their text (:func:`_timestamp_tokens`): a vocabulary may put
  its special tokens anywhere, so no id is assumed to follow ``<|notimestamps|>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.generation.config import read_generation_defaults
from inference4py.generation.sampling import choose_token, greedy, make_rng
from inference4py.speech.files.vocabulary import WHISPER_LANGUAGES
from inference4py.tasks.languages import Language
from inference4py.tokenization import Tokenizer

_NO_RANDOMNESS = make_rng(0)  # greedy draws nothing; choose_token takes a generator all the same

TASKS = ("transcribe", "translate")

_LANGUAGE_ALIASES = {
    **{name: code for code, name in WHISPER_LANGUAGES.items()},
    "burmese": "my",
    "valencian": "ca",
    "flemish": "nl",
    "haitian": "ht",
    "letzeburgesch": "lb",
    "pushto": "ps",
    "panjabi": "pa",
    "moldavian": "ro",
    "moldovan": "ro",
    "sinhalese": "si",
    "castilian": "es",
    "mandarin": "zh",
}


def language_code(value: Language | str) -> str:
    """Whisper's code for a language given as a code (``"fr"``), a name (``"french"``), ``"<|fr|>"`` or a Language.

    Raises:
        ConfigurationError: not a language Whisper knows.
    """
    if isinstance(value, Language):
        value = value.iso_code
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"language must be a code like 'en' or a name like 'english', got {value!r}.")
    key = value.strip().lower()
    if key.startswith("<|") and key.endswith("|>"):
        key = key[2:-2]
    if key in WHISPER_LANGUAGES:
        return key
    if key in _LANGUAGE_ALIASES:
        return _LANGUAGE_ALIASES[key]
    raise ConfigurationError(
        f"Unknown language {value!r}. Use one of Whisper's codes ({', '.join(list(WHISPER_LANGUAGES)[:12])}, ...) "
        "or an English name such as 'german'."
    )


def _timestamp_tokens(tokenizer: Tokenizer) -> tuple[int, int] | None:
    """The tokenizer's timestamp tokens: (id of ``<|0.00|>``, how many of ``<|0.00|>``, ``<|0.02|>``, ... follow it).

    Only the run of consecutive ids counts (Whisper's 1501 tokens, ``<|0.00|>`` to ``<|30.00|>``);
    None when the tokenizer has no ``<|0.00|>``.
    """
    first = tokenizer.token_to_id("<|0.00|>")
    if first is None:
        return None
    count = 1
    # <|k * 0.02|> written from integers (no float rounding): k = 50 * seconds + hundredths / 2
    while tokenizer.token_to_id(f"<|{count // 50}.{count % 50 * 2:02d}|>") == first + count:
        count += 1
    return first, count


@dataclass(frozen=True)
class WhisperVocab:
    """The special ids and generation settings of one Whisper model folder."""

    sot: int
    eot: int
    no_timestamps: int | None
    lang_to_id: Mapping[str, int]  # code -> id
    task_to_id: Mapping[str, int]
    is_multilingual: bool
    forced_decoder_ids: tuple[tuple[int, int | None], ...]
    max_initial_timestamp_index: int | None
    suppress_tokens: tuple[int, ...]
    begin_suppress_tokens: tuple[int, ...]
    #: (id of ``<|0.00|>``, number of timestamp tokens) from the tokenizer, or None when it has none
    timestamp_tokens: tuple[int, int] | None = None
    #: ids of the special tokens (neither text nor timestamps): the tokenizer's and the ones above
    special_ids: frozenset[int] = frozenset()
    #: ``<|startofprev|>`` (generation_config ``prev_sot_token_id``), the context marker; None when absent
    prev_sot: int | None = None
    #: ``<|nospeech|>`` (``<|nocaptions|>`` in older vocabularies; else the id before ``<|notimestamps|>``,
    #: as transformers takes it); None when unknown
    no_speech: int | None = None

    @property
    def timestamp_range(self) -> range | None:
        """The ids of the timestamp tokens (``<|0.00|>`` first), or None when the vocabulary has none."""
        if self.timestamp_tokens is None:
            return None
        first, count = self.timestamp_tokens
        return range(first, first + count)

    @classmethod
    def read(
        cls, folder: Path, tokenizer: Tokenizer, config: Mapping[str, Any], vocab_size: int | None
    ) -> WhisperVocab:
        gen = read_generation_defaults(folder)
        token = tokenizer.token_to_id

        def first_id(value: Any) -> int | None:
            if isinstance(value, (list, tuple)):
                return int(value[0]) if value else None
            return None if value is None else int(value)

        sot = first_id(gen.get("decoder_start_token_id"))
        sot = sot if sot is not None else token("<|startoftranscript|>")
        eot = first_id(gen.get("eos_token_id"))
        eot = eot if eot is not None else token("<|endoftext|>")
        if sot is None or eot is None:
            raise UnsupportedModelError(
                f"{folder} does not look like a Whisper model: no <|startoftranscript|> / <|endoftext|> token and no "
                "decoder_start_token_id / eos_token_id in generation_config.json."
            )
        no_ts = gen.get("no_timestamps_token_id")
        if no_ts is None:
            no_ts = token("<|notimestamps|>")
        raw_langs = gen.get("lang_to_id")
        if isinstance(raw_langs, Mapping) and raw_langs:
            langs = {str(k).strip("<|>"): int(v) for k, v in raw_langs.items()}
        else:
            langs = {c: i for c in WHISPER_LANGUAGES if (i := token(f"<|{c}|>")) is not None}
        raw_tasks = gen.get("task_to_id")
        if isinstance(raw_tasks, Mapping) and raw_tasks:
            tasks = {str(k): int(v) for k, v in raw_tasks.items()}
        else:
            tasks = {t: i for t in TASKS if (i := token(f"<|{t}|>")) is not None}
        multilingual = gen.get("is_multilingual")
        if multilingual is None:
            # openai/whisper's rule for its own vocabularies (51864 ids: English-only, 51865+: multilingual);
            # other sizes: multilingual when language tokens exist.
            multilingual = vocab_size >= 51865 if vocab_size and 51000 < vocab_size < 52000 else bool(langs)
        forced = tuple((int(p), None if t is None else int(t)) for p, t in (gen.get("forced_decoder_ids") or ()))
        mit = gen.get("max_initial_timestamp_index")
        specials = {int(sot), int(eot), *langs.values(), *tasks.values(), *tokenizer.all_special_ids}
        if no_ts is not None:
            specials.add(int(no_ts))
        stamps = _timestamp_tokens(tokenizer)
        if stamps is None and no_ts is not None and vocab_size and tokenizer.id_to_token(int(no_ts) + 1) is None:
            # openai's layout when the tokenizer lists no <|0.00|>...: the ids after <|notimestamps|>, up to the
            # model's vocabulary size, are timestamps that the tokenizer does not even know (never text)
            stamps = (int(no_ts) + 1, int(vocab_size) - int(no_ts) - 1)
        if stamps is not None:
            specials.difference_update(range(stamps[0], stamps[0] + stamps[1]))
        prev_sot = first_id(gen.get("prev_sot_token_id"))
        prev_sot = prev_sot if prev_sot is not None else token("<|startofprev|>")
        no_speech = token("<|nospeech|>")
        no_speech = no_speech if no_speech is not None else token("<|nocaptions|>")
        if no_speech is None and no_ts is not None:
            no_speech = int(no_ts) - 1
        return cls(
            sot=int(sot),
            eot=int(eot),
            no_timestamps=None if no_ts is None else int(no_ts),
            lang_to_id=langs,
            task_to_id=tasks,
            is_multilingual=bool(multilingual),
            forced_decoder_ids=forced,
            max_initial_timestamp_index=None if mit is None else int(mit),
            suppress_tokens=tuple(int(t) for t in gen.get("suppress_tokens") or config.get("suppress_tokens") or ()),
            begin_suppress_tokens=tuple(
                int(t) for t in gen.get("begin_suppress_tokens") or config.get("begin_suppress_tokens") or ()
            ),
            timestamp_tokens=stamps,
            special_ids=frozenset(specials),
            prev_sot=None if prev_sot is None else int(prev_sot),
            no_speech=None if no_speech is None else int(no_speech),
        )

    def most_likely_language(self, logits: np.ndarray) -> int:
        """The language token with the highest logit (``logits``: ``[vocab]``); lowest id on ties, like torch.

        Every other token is masked, then the token is chosen as every token is
        (:func:`~inference4py.generation.sampling.choose_token`, greedy): NaN logits are refused.
        """
        ids = np.fromiter(self.lang_to_id.values(), dtype=np.int64)
        scores = np.full((1, logits.shape[-1]), -np.inf, dtype=np.float32)  # [1, vocab]
        scores[0, ids] = logits[ids]
        return choose_token(greedy, scores, _NO_RANDOMNESS)

    def language_of(self, token_id: int) -> str | None:
        for code, i in self.lang_to_id.items():
            if i == token_id:
                return code
        return None

    def language_in(self, prompt: Sequence[int | None]) -> str | None:
        """The language code of a decoder prompt (``"en"`` for English-only models)."""
        if not self.is_multilingual:
            return "en"
        return self.language_of(prompt[1]) if len(prompt) > 1 and prompt[1] is not None else None
