"""The chat page at ``/``: one static HTML file from the package data, no build step, nothing fetched from elsewhere.

The page talks to the server's own ``/v1/models`` and ``/v1/chat/completions`` (streamed), so it
works offline. Its Content-Security-Policy allows only the page's own inline script and style (by
their hashes) and requests to the same origin.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

__all__ = ["add_page_route"]

_PAGE = "chat.html"


def add_page_route(app: FastAPI) -> None:
    """Serve the chat page at ``GET /`` (left out of the OpenAPI schema)."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        html, policy = _page()
        return HTMLResponse(
            html,
            headers={
                "Content-Security-Policy": policy,
                "Cache-Control": "no-cache",
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
            },
        )


@functools.lru_cache(maxsize=1)
def _page() -> tuple[str, str]:
    """The page's HTML and its Content-Security-Policy, read once from the package data."""
    html = (resources.files("inference4py.serve") / "static" / _PAGE).read_text(encoding="utf-8")
    scripts = " ".join(_hashes(html, "script")) or "'none'"
    styles = " ".join(_hashes(html, "style")) or "'none'"
    policy = (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; connect-src 'self'; img-src data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return html, policy


def _hashes(html: str, tag: str) -> list[str]:
    """CSP sources for the page's inline ``<tag>`` blocks (the browser hashes exactly the text between the tags)."""
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
    return [f"'sha256-{base64.b64encode(hashlib.sha256(b.encode('utf-8')).digest()).decode()}'" for b in blocks]
