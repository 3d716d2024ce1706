"""One-line helpers: ``inference4py.summarize(text)``, ``translate``, ``correct``.

Each builds the default model on first use and keeps it for later calls (one
per model, shared by threads); ``close_all()`` releases them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from inference4py.tasks.languages import Language

__all__ = ["summarize", "translate", "correct", "close_all"]

_cache: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def _get(key: tuple[str, str], make: Callable[[], Any]) -> Any:
    with _lock:
        task = _cache.get(key)
        if task is None:
            task = _cache[key] = make()
        return task


def summarize(text: str, *, model: str = "inference4j/distilbart-cnn-12-6", **options: Any) -> str:
    """Summarize ``text`` with DistilBART-CNN (or the BART ``model`` given)."""
    from inference4py.tasks.bart import BartSummarizer

    task = _get(("summarize", model), lambda: BartSummarizer.builder().model_id(model).build())
    return task.summarize(text, **options)


def translate(
    text: str, *, source: Language | str = "en", target: Language | str = "de", model: str | None = None, **options: Any
) -> str:
    """Translate with the opus-mt model of the pair (``inference4j/opus-mt-{source}-{target}``)."""
    from inference4py.tasks.marian import MarianTranslator

    src, tgt = Language.of(source), Language.of(target)
    repo = model or f"inference4j/opus-mt-{src.iso_code}-{tgt.iso_code}"
    task = _get(
        ("translate", repo),
        lambda: MarianTranslator._preset(
            f"opus-mt-{src.iso_code}-{tgt.iso_code}", repo, source=src, target=tgt
        ).build(),
    )
    return task.translate(text, target=tgt, source=src, **options)


def correct(text: str, *, model: str = "inference4j/coedit-base", **options: Any) -> str:
    """Fix the grammar of ``text`` with CoEdIT."""
    from inference4py.tasks.coedit import CoeditGrammarCorrector

    task = _get(("correct", model), lambda: CoeditGrammarCorrector.coeditBase().model_id(model).build())
    return task.correct(text, **options)


def close_all() -> None:
    """Close every model the helpers built."""
    with _lock:
        for task in _cache.values():
            task.close()
        _cache.clear()
