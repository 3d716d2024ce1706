"""``GET /metrics``: every served model's counters and latency histograms in Prometheus' text format.

The workers import :class:`Histogram` from here and count; this module reads their numbers by
name (``_COUNTERS``, ``_HISTOGRAMS``) and never imports the workers.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

__all__ = ["Histogram", "prometheus"]

# seconds: a token on a small CPU model takes milliseconds, a first token up to seconds
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    """Observations counted into cumulative buckets (Prometheus' histogram type)."""

    def __init__(self, buckets: Sequence[float] = _LATENCY_BUCKETS) -> None:
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        running = 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts):
            running += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.sum}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


_COUNTERS = (
    ("requests_total", "counter", "requests admitted", "requests"),
    ("rejected_total", "counter", "requests answered 503 (queue full)", "rejected"),
    ("requests_waiting", "gauge", "requests admitted and not started", "waiting"),
    ("requests_running", "gauge", "requests running (sequences in the batch)", "running"),
    ("requests_completed_total", "counter", "requests finished (any outcome)", "completed"),
    ("requests_cancelled_total", "counter", "requests whose client went away", "cancelled"),
    ("requests_timed_out_total", "counter", "requests stopped by the request timeout", "timed_out"),
    ("prompt_tokens_total", "counter", "prompt tokens of finished requests", "prompt_tokens"),
    (
        "prefill_tokens_total",
        "counter",
        "prompt tokens run through the model (the rest came from the prefix cache)",
        "prefilled_tokens",
    ),
    ("generation_tokens_total", "counter", "tokens generated", "generated_tokens"),
    ("prefix_cache_hits_total", "counter", "requests that started from a cached prefix", "prefix_hits"),
    (
        "prefix_cache_reused_tokens_total",
        "counter",
        "prompt tokens taken from the prefix cache",
        "prefix_reused_tokens",
    ),
    ("prefix_cache_bytes", "gauge", "memory held by the prefix cache", "prefix_bytes"),
    (
        "prefix_cache_hit_rate",
        "gauge",
        "requests that started from a cached prefix, over requests admitted (0 to 1)",
        "prefix_hit_rate",
    ),
    (
        "kv_cache_usage_ratio",
        "gauge",
        "KV-cache utilization (0 to 1): positions the running requests reserve over what the batch may hold "
        "(vLLM's kv_cache_usage_perc; routers read it)",
        "kv_usage",
    ),
    ("decode_steps_total", "counter", "batched decode steps", "steps"),
    ("decode_step_rows_total", "counter", "rows summed over decode steps (over steps: the mean batch)", "step_rows"),
)

_HISTOGRAMS = (
    ("time_to_first_token_seconds", "time from a request's arrival to its first token", "ttft"),
    ("inter_token_latency_seconds", "time between two tokens of one request", "itl"),
)


# every served model's, loaded or not (a registry entry's numbers)
_MODEL_STATES = (
    ("model_loaded", "gauge", "1 when the model is loaded, 0 when not", "loaded"),
    ("model_loads_total", "counter", "loads of the model on demand", "loads"),
    ("model_unloads_total", "counter", "unloads of the model (idle, least recently used, or asked for)", "unloads"),
    ("model_load_failures_total", "counter", "loads of the model that failed", "load_failures"),
)


def prometheus(workers: Mapping[str, object], models: Mapping[str, object] | None = None) -> str:
    """Every model's counters and histograms.

    Args:
        workers: Model name -> its worker (a ``ModelWorker``): any object with the attributes
            that ``_COUNTERS`` (numbers) and ``_HISTOGRAMS`` (:class:`Histogram`) name.
        models: Every served model's name -> an object with the attributes ``_MODEL_STATES`` names
            (the registry's entries: loaded or not).
    """
    lines = []
    for metric, kind, help_text, attr in _COUNTERS:
        name = f"inference4py_{metric}"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f'{name}{{model="{model}"}} {getattr(w, attr)}' for model, w in workers.items()]
    for metric, help_text, attr in _HISTOGRAMS:
        name = f"inference4py_{metric}"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        for model, w in workers.items():
            lines += getattr(w, attr).lines(name, f'model="{model}"')
    for metric, kind, help_text, attr in _MODEL_STATES if models is not None else ():
        name = f"inference4py_{metric}"
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines += [f'{name}{{model="{model}"}} {getattr(m, attr)}' for model, m in (models or {}).items()]
    return "\n".join(lines) + "\n"
