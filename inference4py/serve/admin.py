"""The admin routes: load or unload a served model now, ahead of (or after) the requests that use it.

- ``POST /admin/models/{name}/load`` loads the model (nothing when it is loaded) and answers its
  /v1/models entry; a load that fails is the 500 a request would get, no room the 503.
- ``POST /admin/models/{name}/unload`` unloads it and answers its entry. A model answering requests
  is not waited for: 409 (code ``model_busy``); so is a model given loaded at start (``model_pinned``).

Both are behind the API key, as every route but /health and the chat page is (:mod:`~inference4py.serve.guard`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from inference4py.serve.registry import ModelRegistry

__all__ = ["add_admin_routes"]


def add_admin_routes(app: FastAPI, models: ModelRegistry) -> None:
    """Add ``POST /admin/models/{name}/load`` and ``POST /admin/models/{name}/unload`` to ``app``."""

    @app.post("/admin/models/{name}/load")
    async def load(name: str) -> dict[str, Any]:
        await models.load(name)
        return models.card(name)

    @app.post("/admin/models/{name}/unload")
    async def unload(name: str) -> dict[str, Any]:
        await models.unload(name)
        return models.card(name)
