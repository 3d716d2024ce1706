"""MemoryBudget: the bytes a server's models may hold together, counted in one place.

One budget is shared by every model of a server (``--memory-gb``). What it counts:

- each model's weights, charged when the model is served (:meth:`MemoryBudget.hold`);
- each running request's KV cache: the positions it may reach (prompt + ``max_new_tokens``) times
  the model's bytes per position, reserved when the request is admitted and released when it leaves
  (:meth:`MemoryBudget.reserve`, :meth:`MemoryBudget.release`);
- each model's prefix cache: an entry is kept only while the budget has room for it, and the
  scheduler gives entries back before a request would have to wait.

A request that does not fit waits for one that does to finish; one that could never fit, even
alone, is refused (:class:`~inference4py.errors.MemoryBudgetError`). Thread-safe: schedulers run
on their own threads, and one that is waiting is woken when another releases memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from inference4py.errors import MemoryBudgetError

__all__ = ["MemoryBudget"]


def _mb(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.0f} MB"


class MemoryBudget:
    """Bytes that the weights, KV caches and prefix caches of several models share.

    Args:
        total_bytes: The budget (a server's ``--memory-gb`` in bytes).
    """

    def __init__(self, total_bytes: int) -> None:
        if total_bytes <= 0:
            raise ValueError(f"a memory budget needs a positive size, got {total_bytes} bytes")
        self.total = int(total_bytes)
        self._held: dict[str, int] = {}  # model weights, by name
        self._reserved = 0  # KV caches and prefix caches
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ numbers
    @property
    def held(self) -> int:
        """Bytes of the models' weights."""
        return sum(self._held.values())

    @property
    def reserved(self) -> int:
        """Bytes of running requests' KV caches and of prefix caches."""
        return self._reserved

    @property
    def free(self) -> int:
        return self.total - self.held - self._reserved

    # ------------------------------------------------------------------ weights
    def hold(self, name: str, nbytes: int) -> None:
        """Charge model ``name``'s weights.

        Raises:
            MemoryBudgetError: they do not fit beside what is held and reserved.
        """
        with self._lock:
            if nbytes > self.total - self.held - self._reserved:
                raise MemoryBudgetError(
                    f"Model {name!r} needs {_mb(nbytes)}, and the memory budget ({_mb(self.total)}) has "
                    f"{_mb(self.total - self.held - self._reserved)} left beside the models already served "
                    f"({', '.join(self._held) or 'none'}). Raise --memory-gb or serve fewer models."
                )
            self._held[name] = int(nbytes)

    def drop(self, name: str) -> None:
        """Give model ``name``'s weights back (it was unloaded)."""
        with self._lock:
            self._held.pop(name, None)
        self._notify()

    # ------------------------------------------------------------------ caches
    def check(self, what: str, nbytes: int) -> None:
        """Raise when ``nbytes`` could never be reserved, even with nothing else running.

        Raises:
            MemoryBudgetError: naming ``what`` and the room the budget has beside the weights.
        """
        room = self.total - self.held
        if nbytes > room:
            raise MemoryBudgetError(
                f"{what} needs {_mb(nbytes)} of KV cache, more than the memory budget leaves beside the models' "
                f"weights ({_mb(room)} of {_mb(self.total)}). Ask for fewer tokens (max_tokens), send a shorter "
                "prompt, or raise --memory-gb."
            )

    def reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` if they fit now; False otherwise (the caller waits or frees some)."""
        with self._lock:
            if nbytes > self.total - self.held - self._reserved:
                return False
            self._reserved += int(nbytes)
            return True

    def release(self, nbytes: int) -> None:
        """Give back bytes :meth:`reserve` gave; waiting schedulers are woken."""
        if nbytes <= 0:
            return
        with self._lock:
            self._reserved = max(0, self._reserved - int(nbytes))
        self._notify()

    # ------------------------------------------------------------------ waking
    def listen(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` whenever memory is given back (a scheduler with requests waiting for room)."""
        with self._lock:
            self._listeners.append(wake)

    def forget(self, wake: Callable[[], None]) -> None:
        with self._lock:
            if wake in self._listeners:
                self._listeners.remove(wake)

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for wake in listeners:
            wake()
