"""The Ray Data engine of ``run_batch``: an actor pool of model replicas over ``map_batches``.

Each actor (:class:`Replica`) loads the model once in ``__init__`` and runs one batch per
``__call__`` with the same task adapter as the local runner.  Result batches stream back to the
driver, which writes the parts (one writer: a batch Ray retries after a replica died is written
once).  Replicas get ``cores // replicas`` CPUs each and as many onnxruntime intra-op threads, so
they do not oversubscribe the machine; a dead replica is restarted and its batch retried
(``max_restarts`` / ``max_task_retries``).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from inference4py import errors
from inference4py.batch.adapters import RESULT_COLUMNS, load_adapter
from inference4py.batch.inputs import InputRow
from inference4py.errors import ConfigurationError, Inference4pyError, InferenceError

__all__ = ["Replica", "run_on_ray", "require_ray", "RAY_INSTALL"]

RAY_INSTALL = 'pip install "inference4py[ray]"'
_RAISED = re.compile(r"inference4py\.errors\.(\w+): (.+)")


def require_ray() -> Any:
    """The ``ray`` module, or a ConfigurationError naming the extra to install."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ConfigurationError(
            f"replicas / ray_address run the job on Ray Data, which is not installed: {RAY_INSTALL} "
            "(or drop --replicas and --ray-address to run in this process)."
        ) from exc
    return ray


class Replica:
    """One model copy in Ray's actor pool: loads once, then runs a batch of rows per call.

    ``crash_once`` is a test hook: ``(row id, marker file)`` makes the process exit abruptly the first
    time it meets that row (the marker file records that it happened), as a killed replica would.
    """

    def __init__(
        self, *, adapter_options: dict[str, Any], threads: int, crash_once: tuple[str, str] | None = None
    ) -> None:
        self._adapter = load_adapter(**adapter_options, threads=threads)
        self._crash_once = crash_once

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        rows = [InputRow(str(r["id"]), json.loads(r["value"])) for r in batch.to_pylist()]
        if self._crash_once is not None:
            row_id, marker = self._crash_once
            if any(r.id == row_id for r in rows) and not os.path.exists(marker):
                with open(marker, "w", encoding="utf-8") as fh:
                    fh.write(str(os.getpid()))
                os._exit(1)  # as if the replica were killed mid-batch
        results = self._adapter.run(rows)
        return pa.Table.from_pylist([{c: r[c] for c in RESULT_COLUMNS} for r in results], schema=_schema())


def _schema() -> Any:
    from inference4py.batch.outputs import _schema as schema

    return schema()


def _library_error(exc: BaseException) -> Exception:
    """The library's own error behind a Ray failure (a replica's ``__init__`` or batch raised it), else InferenceError."""
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, Inference4pyError):
            try:
                return type(current)(str(current))
            except TypeError:
                return InferenceError(str(current))
        todo += [getattr(current, "cause", None), current.__cause__, current.__context__]
    # an actor whose __init__ raised comes back as ActorDiedError holding the traceback as text only
    found = _RAISED.findall(str(exc))
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, Inference4pyError):
            try:
                return cls(message.strip())
            except TypeError:
                pass
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return InferenceError(
        f"The Ray job failed: {type(exc).__name__}: {first} (the Ray logs have the rest); rerun to resume."
    )


def _cpus_per_replica(ray: Any, replicas: int) -> int:
    """The CPUs each replica may use: the cluster's CPUs shared out, but no more than one node has."""
    total = int(ray.cluster_resources().get("CPU", 1))
    per_node = max((int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")), default=total)
    if replicas > total:
        raise ConfigurationError(
            f"{replicas} replicas need at least {replicas} CPUs and the Ray cluster has {total}: lower --replicas."
        )
    return max(1, min(per_node, total // replicas))


def run_on_ray(
    pending: Sequence[InputRow],
    write: Callable[[Sequence[dict[str, Any]]], None],
    *,
    adapter_options: dict[str, Any],
    batch_size: int,
    replicas: int,
    ray_address: str | None,
    num_cpus: int | None,
    threads: int | None,
    max_restarts: int,
    max_task_retries: int,
    crash_once: tuple[str, str] | None = None,
) -> set[str]:
    """Run ``pending`` on an actor pool, calling ``write`` with each result batch; returns the ids written."""
    ray = require_ray()
    started_here = False
    if not ray.is_initialized():
        if ray_address is not None:
            ray.init(address=ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
        started_here = True
    try:
        cpus = _cpus_per_replica(ray, replicas)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # run_batch draws its own
        items = [{"id": row.id, "value": json.dumps(row.value)} for row in pending]
        with warnings.catch_warnings():
            # Ray 2.60 deprecates remote args as keywords but reads an actor pool's restarts from them only
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated", category=DeprecationWarning)
            dataset = ray.data.from_items(items).map_batches(
                Replica,
                fn_constructor_kwargs={
                    "adapter_options": adapter_options,
                    "threads": threads or cpus,
                    "crash_once": crash_once,
                },
                batch_size=batch_size,
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=replicas),
                num_cpus=cpus,
                max_restarts=max_restarts,
                max_task_retries=max_task_retries,
            )
        written: set[str] = set()
        try:
            for table in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
                # a batch retried after a replica died may come back twice: keep the first copy
                fresh = [r for r in table.to_pylist() if r["id"] not in written]
                written.update(r["id"] for r in fresh)
                if fresh:
                    write(fresh)
        except ray.exceptions.RayError as exc:
            raise _library_error(exc) from exc
        return written
    finally:
        if started_here:
            ray.shutdown()
