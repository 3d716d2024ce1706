"""T5SqlGenerator: natural-language questions to SQL, given a schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference4py.errors import InvalidInputError
from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.seq2seq_base import Seq2SeqBuilder, Seq2SeqTask, TextOutput

__all__ = ["T5_SQL_PRESETS", "T5SqlGenerator", "awesome_sql_prompt", "spider_sql_prompt"]


def awesome_sql_prompt(query: str, *, schema: str) -> str:
    """t5-small-awesome-text-to-sql's format."""
    return f"tables: {schema} query for: {query}"


def spider_sql_prompt(query: str, *, schema: str) -> str:
    """T5-LM-Large-text2sql-spider's format."""
    return f"Question: {query} Schema: {schema}"


#: T5SqlGenerator's presets: the method name (inference4j's), the Hub repo, the prompt format.
T5_SQL_PRESETS = PresetTable(
    Seq2SeqBuilder,
    [
        Preset(
            "t5SmallAwesome",
            "inference4j/t5-small-awesome-text-to-sql",
            "t5-small-awesome-text-to-sql, inference4j/t5-small-awesome-text-to-sql.",
            {"prompt_formatter": awesome_sql_prompt},
        ),
        Preset(
            "t5LargeSpider",
            "inference4j/T5-LM-Large-text2sql-spider",
            "T5-LM-Large-text2sql-spider, inference4j/T5-LM-Large-text2sql-spider.",
            {"prompt_formatter": spider_sql_prompt},
        ),
    ],
)


class T5SqlGenerator(Seq2SeqTask):
    """Text-to-SQL with T5 models.

    Example:
        >>> T5SqlGenerator.t5SmallAwesome().build().generate_sql(   # doctest: +SKIP
        ...     "How many users?", "CREATE TABLE users (id INT)")
    """

    t5SmallAwesome = T5_SQL_PRESETS.method("t5SmallAwesome")  # inference4j's names
    t5LargeSpider = T5_SQL_PRESETS.method("t5LargeSpider")

    def generate_sql(
        self, query: str, schema: str, on_token: Callable[[str], None] | None = None, **overrides: Any
    ) -> TextOutput:
        """SQL answering ``query`` over ``schema`` (CREATE TABLE statements or a table description)."""
        if not isinstance(schema, str) or not schema.strip():
            raise InvalidInputError("The schema is empty: pass the CREATE TABLE statements the query runs against.")
        return self._run_formatted(query, on_token, overrides, awesome_sql_prompt, schema=schema)
