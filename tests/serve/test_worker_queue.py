"""ModelWorker's own thread: a job taken off the queue before it starts gives its place back."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("fastapi")

from inference4py.errors import QueueFullError  # noqa: E402
from inference4py.serve.worker import ModelWorker  # noqa: E402


def test_a_cancelled_job_that_never_started_leaves_the_queue():
    async def scenario():
        worker = ModelWorker("speech", object(), max_queue=1)  # not a text generator: jobs on its thread
        release = threading.Event()
        busy = worker.submit(release.wait)
        await asyncio.sleep(0.05)
        assert (worker.waiting, worker.running) == (0, 1)
        queued = worker.submit(lambda: "never")
        assert worker.waiting == 1
        with pytest.raises(QueueFullError):
            worker.submit(lambda: "refused")
        queued.cancel()  # its client left before it started
        await asyncio.sleep(0)
        assert worker.waiting == 0
        again = worker.submit(lambda: "ran")  # the place is free again
        release.set()
        assert await busy is True and await again == "ran"
        assert (worker.waiting, worker.running) == (0, 0)
        worker.close()

    asyncio.run(scenario())
