"""Whisper's decoder prompt: ``<|startoftranscript|>``, the language, the task, ``<|notimestamps|>``.

The twin of transformers' ``_retrieve_init_tokens``: the language is the one given, or left
as a slot for detection (one decoder step after ``<|startoftranscript|>``, argmax over the
language tokens); the task follows; ``<|notimestamps|>`` ends the prompt unless timestamps are
requested.  ``forced_decoder_ids`` of generation_config.json are the prompt when neither
language nor task is set.  :func:`check_request` refuses what a model cannot do, and
:func:`resolve_request` gives a call's language, task and timestamps (the builder's by default).
"""

from __future__ import annotations

from pathlib import Path

from inference4py.errors import ConfigurationError, UnsupportedModelError
from inference4py.speech.vocab import TASKS, WhisperVocab, language_code
from inference4py.tasks.languages import Language


def resolve_request(
    vocab: WhisperVocab,
    folder: Path,
    language: Language | str | None,
    task: str | None,
    timestamps: bool | None,
    *,
    defaults: tuple[str | None, str | None, bool],
) -> tuple[str | None, str | None, bool]:
    """A call's (language code, task, timestamps): each given one, else the builder's from ``defaults``.

    Raises:
        ConfigurationError: an unknown task or language.
        UnsupportedModelError: what the model cannot do (see :func:`check_request`).
    """
    default_language, default_task, default_timestamps = defaults
    lang = language_code(language) if language is not None else default_language
    task_name = task if task is not None else default_task
    if task_name is not None and task_name not in TASKS:
        raise ConfigurationError(f"task must be 'transcribe' or 'translate', got {task_name!r}.")
    want_ts = default_timestamps if timestamps is None else bool(timestamps)
    check_request(vocab, folder, lang, task_name, want_ts)
    return lang, task_name, want_ts


def check_request(vocab: WhisperVocab, folder: Path, language: str | None, task: str | None, timestamps: bool) -> None:
    """Refuse a language, task or timestamps the model in ``folder`` cannot do.

    Raises:
        UnsupportedModelError: an English-only model asked for another language or translation; a
            language or task without its token; timestamps without ``<|notimestamps|>`` or without
            the tokenizer's timestamp tokens (``<|0.00|>``, ``<|0.02|>``, ...).
    """
    if not vocab.is_multilingual:
        if language not in (None, "en") or task not in (None, "transcribe"):
            raise UnsupportedModelError(
                f"{folder} is an English-only Whisper model: it cannot take language={language!r}"
                f"{'' if task in (None, 'transcribe') else ', task=' + repr(task)}. Use a multilingual model "
                "(e.g. WhisperSpeechModel.whisperSmall()) for other languages and translation."
            )
    else:
        if language is not None and language not in vocab.lang_to_id:
            raise UnsupportedModelError(
                f"This model has no language token for {language!r}; it knows {', '.join(vocab.lang_to_id)}."
            )
        if task is not None and task not in vocab.task_to_id:
            raise UnsupportedModelError(f"This model has no <|{task}|> token (generation_config.json task_to_id).")
    if timestamps and vocab.no_timestamps is None:
        raise UnsupportedModelError(
            f"{folder} does not say which token is <|notimestamps|> (no_timestamps_token_id in "
            "generation_config.json), so timestamps cannot be predicted. Add it, or transcribe without timestamps."
        )
    if timestamps and vocab.timestamp_tokens is None:
        raise UnsupportedModelError(
            f"The tokenizer of {folder} has no timestamp tokens (<|0.00|>, <|0.02|>, ...), so timestamps cannot be "
            "predicted.",
            fix="timestamps",
        )


def decoder_prompt(
    vocab: WhisperVocab, language: str | None, task: str | None, timestamps: bool
) -> tuple[list[int | None], int | None]:
    """transformers' ``_retrieve_init_tokens``: the decoder prompt, with None where a detected language goes.

    Returns (tokens, index of the language slot to fill by detection or None).
    """
    if not vocab.is_multilingual:  # English-only: language / task tokens do not exist (transformers would raise)
        language = task = None
    init: list[int | None] = [vocab.sot]
    if task is None and language is None and vocab.forced_decoder_ids:
        for i, (pos, tok) in enumerate(vocab.forced_decoder_ids, start=1):
            if pos != i:
                raise UnsupportedModelError(
                    f"forced_decoder_ids {list(vocab.forced_decoder_ids)} in generation_config.json do not follow "
                    "Whisper's prompt pattern (positions 1, 2, ...)."
                )
            init.append(tok)
    lang_undefined = len(init) <= 1 or init[1] is None
    detect_at = None
    if language is not None:
        lang_id = vocab.lang_to_id[language]
        if len(init) > 1:
            init[1] = lang_id
        else:
            init.append(lang_id)
    elif vocab.is_multilingual and vocab.lang_to_id and lang_undefined:
        if len(init) > 1:
            init[1] = None
        else:
            init.append(None)
        detect_at = 1
    if task is not None:
        init.append(vocab.task_to_id[task])
    elif language is not None and vocab.task_to_id and not any(t in init for t in vocab.task_to_id.values()):
        init.append(vocab.task_to_id.get("transcribe"))
    if vocab.no_timestamps is not None:
        if not timestamps and init[-1] != vocab.no_timestamps:
            init.append(vocab.no_timestamps)
        elif timestamps and init[-1] == vocab.no_timestamps:
            init.pop()
    if detect_at is None:
        init = [t for t in init if t is not None]
    return init, detect_at
