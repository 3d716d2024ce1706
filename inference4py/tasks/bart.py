"""BartSummarizer: abstractive summarization with BART-CNN models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["BartSummarizer"]


class BartSummarizer(Seq2SeqTask):
    """Summarize articles with BART fine-tuned on CNN/DailyMail (raw text in, summary out).

    The search settings (beams, length penalty, no-repeat n-grams, min/max length)
    come from the model's generation_config.json, as in transformers.

    Example:
        >>> with BartSummarizer.distilBartCnn().build() as bart:   # doctest: +SKIP
        ...     print(bart.summarize(article))
    """

    @classmethod
    def distilBartCnn(cls) -> Seq2SeqBuilder:
        return cls._preset("distilBartCnn", "inference4j/distilbart-cnn-12-6")

    @classmethod
    def bartLargeCnn(cls) -> Seq2SeqBuilder:
        return cls._preset("bartLargeCnn", "inference4j/bart-large-cnn")

    def summarize(self, article: str, on_token: Callable[[str], None] | None = None, **overrides: Any) -> TextOutput:
        """The summary of ``article`` (a ``str`` that also carries the GenerationResult)."""
        return self._run_formatted(article, on_token, overrides)
