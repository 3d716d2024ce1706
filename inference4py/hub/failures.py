"""huggingface_hub / requests / httpx errors -> inference4py errors.

:func:`_hub_errors` translates them; :func:`_unreachable_errors` and :func:`_status_code`
tell "the Hub cannot be reached" and server errors apart, for the fall-back to the cache.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from inference4py import env
from inference4py.errors import HubError, ModelNotFoundError


@contextlib.contextmanager
def _hub_errors(repo_id: str, revision: str | None) -> Iterator[None]:
    """Translate huggingface_hub / requests / httpx errors into inference4py errors."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    unreachable = _unreachable_errors()
    request_failed = _http_client_errors()
    try:
        yield
    except GatedRepoError as exc:
        raise HubError(
            f"Model '{repo_id}' is gated: accept its license on https://huggingface.co/{repo_id} "
            "while logged in, then pass token=... or set HF_TOKEN (or run `hf auth login`)."
        ) from exc
    except RepositoryNotFoundError as exc:
        raise ModelNotFoundError(
            f"Model '{repo_id}' was not found on the Hugging Face Hub. Check the id; if the repo is "
            "private, pass token=... or set HF_TOKEN (or run `hf auth login`)."
        ) from exc
    except RevisionNotFoundError as exc:
        raise ModelNotFoundError(
            f"Revision '{revision}' of model '{repo_id}' was not found on the Hugging Face Hub; "
            "pass an existing branch, tag or commit hash."
        ) from exc
    except LocalEntryNotFoundError as exc:
        raise HubError(
            f"Cannot download '{repo_id}' and it is not in the local cache ({env.hf_hub_cache()}): {exc}"
        ) from exc
    except unreachable as exc:
        raise HubError(f"the Hugging Face Hub cannot be reached ({type(exc).__name__}: {exc})") from exc
    except HfHubHTTPError as exc:
        status = _status_code(exc) or "?"
        raise HubError(f"the Hugging Face Hub answered HTTP {status} for '{repo_id}': {exc}") from exc
    except request_failed as exc:
        raise HubError(f"downloading '{repo_id}' failed: {exc}") from exc


# huggingface_hub < 1.0 talks HTTP through ``requests``; 1.x through ``httpx``; 2.x through
# ``httpx2``.  Only the client library huggingface_hub imported can raise, so the exception
# types are looked up in sys.modules instead of importing (or requiring) any of them.
_HTTP_CLIENTS = ("requests", "httpx", "httpx2")


def _unreachable_errors() -> tuple[type[BaseException], ...]:
    """Exception types meaning "the Hub cannot be reached" (connection, timeout, proxy, offline)."""
    errors: list[type[BaseException]] = [ConnectionError]  # includes huggingface_hub's OfflineModeIsEnabled
    for name in _HTTP_CLIENTS:
        module = sys.modules.get(name)
        if module is None:
            continue
        attrs: tuple[str, ...]
        if name == "requests":  # requests' ProxyError is a ConnectionError
            attrs = ("ConnectionError", "Timeout")
        else:  # httpx / httpx2: TransportError minus UnsupportedProtocol (a bad URL, not a network problem)
            attrs = ("NetworkError", "TimeoutException", "ProxyError", "ProtocolError")
        errors.extend(_exception_types(module, attrs))
    return tuple(errors)


def _http_client_errors() -> tuple[type[BaseException], ...]:
    """Base exception types of the HTTP client libraries: any other failed request."""
    errors: list[type[BaseException]] = []
    for name in _HTTP_CLIENTS:
        module = sys.modules.get(name)
        if module is not None:
            errors.extend(_exception_types(module, ("RequestException", "HTTPError")))
    return tuple(errors)


def _exception_types(module: Any, names: Sequence[str]) -> list[type[BaseException]]:
    found = (getattr(module, name, None) for name in names)
    return [t for t in found if isinstance(t, type) and issubclass(t, BaseException)]


def _status_code(exc: BaseException) -> int | None:
    """The HTTP status of a huggingface_hub HTTP error (requests or httpx response), if any."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None
