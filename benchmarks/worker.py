"""One peer in its own process: ``python -m benchmarks.worker TASK.json OUT.json``.

The task (written by run.py) names the peer module, the model folder, the prompt, the
setting and the mode; the result (JSON) has one record per measured generation plus
memory figures.  Heavy imports happen here, never in run.py.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.peers.common import Unsupported


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class PeakRSS:
    """Polls this process's RSS every few ms while active: the peak during a window."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakRSS:
        self.peak = _rss_mb()
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_mb())
            self._stop.wait(self.interval)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, _rss_mb())


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    module = importlib.import_module(f"benchmarks.peers.{task['module']}")
    rss_start = _rss_mb()
    t = time.perf_counter()
    peer = module.load(task)
    load_s = time.perf_counter() - t
    out: dict[str, Any] = {
        "status": "ok",
        "load_s": load_s,
        "rss_start_mb": rss_start,
        "rss_loaded_mb": _rss_mb(),
        "info": peer.info,
    }
    n, setting, mode = task["max_new_tokens"], task["setting"], task["mode"]
    for _ in range(task.get("warmup", 1)):
        peer.generate(min(n, task.get("warmup_tokens", n)), setting)
    if mode == "speed":
        records = []
        with PeakRSS() as peak:
            for _ in range(task.get("iters", 1)):
                records.append(peer.generate(n, setting).summary())
        out["records"] = records
        out["peak_gen_rss_mb"] = peak.peak
        ids = peer.prompt_ids()
        prefill = [
            peer.generate_ids(ids, 1, "greedy").summary()["total_s"] for _ in range(task.get("prefill_iters", 3))
        ]
        out["prompt_s"] = statistics.median(prefill)
    elif mode == "memory":
        before = _rss_mb()
        with PeakRSS() as peak:
            rec = peer.generate(n, setting).summary()
        out.update(records=[rec], rss_before_mb=before, peak_gen_rss_mb=peak.peak, rss_after_mb=_rss_mb())
    elif mode == "growth":
        rss = []
        for _ in range(task["generations"]):
            peer.generate(n, setting)
            rss.append(_rss_mb())
        out["rss_series_mb"] = rss
    else:
        raise ValueError(f"unknown mode {mode}")
    out["max_rss_mb"] = _max_rss_mb()
    return out


def main(argv: list[str], run: Any = None) -> int:
    """``TASK.json OUT.json``: run the task (``run``, default :func:`run_task`), write its result or
    the error it raised (reported in the table: the run goes on)."""
    task_path, out_path = Path(argv[0]), Path(argv[1])
    task = json.loads(task_path.read_text(encoding="utf-8"))
    try:
        result = (run or run_task)(task)
    except Unsupported as exc:
        result = {"status": "unsupported", "reason": str(exc)}
    except Exception as exc:  # reported in the table, the run goes on
        result = {
            "status": "error",
            "reason": f"{type(exc).__name__}: {str(exc)[:400]}",
            "traceback": traceback.format_exc()[-3000:],
        }
    out_path.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
