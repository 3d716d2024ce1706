"""Offline batch inference: ``run_batch`` over a JSONL / CSV / Parquet file, locally or on Ray Data.

::

    from inference4py.batch import run_batch, read_results
    run_batch("prompts.jsonl", "results/", model="inference4j/smollm2-360m-instruct", task="chat")
    rows = read_results("results/")   # one dict per input row: id, text, finish_reason, token counts, error

See docs/batch.md.  Ray (``pip install "inference4py[ray]"``) is imported only when
``replicas`` or ``ray_address`` is given.
"""

from __future__ import annotations

from inference4py.batch.adapters import RESULT_COLUMNS, TASKS, row_seed
from inference4py.batch.outputs import read_results
from inference4py.batch.runner import BatchReport, run_batch

__all__ = ["run_batch", "read_results", "row_seed", "BatchReport", "RESULT_COLUMNS", "TASKS"]
