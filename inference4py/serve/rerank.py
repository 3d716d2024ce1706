"""The rerank route for served cross-encoders: ``POST /v1/rerank`` (also ``/rerank`` and ``/v2/rerank``).

The request is llama-server's (Jina's and Cohere's): ``query``, ``documents`` (strings, or objects
with a ``text``), ``top_n`` (keep the best N; more than there are: all) and ``return_documents``
(each result carries ``document: {"text": ...}``).  ``model`` may be left out when one reranker is
served.  The answer has llama-server's fields: ``model``, ``object: "list"``, ``usage`` (the tokens
of every pair, special tokens included) and ``results``, best first, each with ``index`` (the
document's position in the request) and ``relevance_score`` (the model's logit, as transformers'
``AutoModelForSequenceClassification`` gives it).

Batching: requests to one model are scored together.  The first runs at once on the model's own
thread; every request that arrives while a run is going on joins the next run, in one list of pairs
that :meth:`OnnxReranker.score_pairs` scores in padded batches (padding is masked: a pair's score
does not depend on the others).
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from typing import Any

import numpy as np
from fastapi import FastAPI, Request

from inference4py.serve.dispatch import require_kind
from inference4py.serve.protocol import ApiError, RerankRequest
from inference4py.serve.registry import ModelRegistry
from inference4py.serve.worker import ModelWorker
from inference4py.tasks.rerank import OnnxReranker, ranked

__all__ = ["RerankBatcher", "add_rerank_routes"]

_ROUTES = ("/v1/rerank", "/rerank", "/v2/rerank")
_FIELDS = "model, query, documents, top_n, return_documents"


class RerankBatcher:
    """The pending rerank requests of one model's worker, run together on its thread."""

    def __init__(self, worker: ModelWorker) -> None:
        self._worker = worker
        self._pending: list[tuple[str, list[str], asyncio.Future[tuple[np.ndarray, int]]]] = []
        self._draining = False
        self.runs = 0  # onnxruntime jobs run (fewer than requests when they came together)
        self.largest = 0  # the most requests one run held

    async def score(self, query: str, documents: list[str]) -> tuple[np.ndarray, int]:
        """The scores of ``documents`` for ``query`` and the tokens they took, from the next run."""
        future: asyncio.Future[tuple[np.ndarray, int]] = asyncio.get_running_loop().create_future()
        self._pending.append((query, documents, future))
        if not self._draining:
            self._draining = True
            asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                taken, self._pending = self._pending, []
                taken = [item for item in taken if not item[2].done()]  # a cancelled request leaves
                if not taken:
                    continue
                model: OnnxReranker = self._worker.model
                job = functools.partial(_score_requests, model, [(query, docs) for query, docs, _ in taken])
                self.runs += 1
                self.largest = max(self.largest, len(taken))
                try:
                    results = await self._worker.run(job)
                except Exception as exc:  # each request answers with it (the app's handlers shape it)
                    for _, _, future in taken:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, _, future), result in zip(taken, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._draining = False


def _score_requests(model: OnnxReranker, requests: list[tuple[str, list[str]]]) -> list[tuple[np.ndarray, int]]:
    """Every request's pairs scored in one call: each request's scores and the tokens its pairs took."""
    per_request = [model.tokenize(query, documents) for query, documents in requests]
    scores = model.score_pairs([pair for pairs in per_request for pair in pairs])
    bounds = np.cumsum([0, *(len(pairs) for pairs in per_request)])
    return [
        (scores[start:end], sum(len(p.ids) for p in pairs))
        for start, end, pairs in zip(bounds[:-1], bounds[1:], per_request, strict=True)
    ]


def add_rerank_routes(app: FastAPI, models: ModelRegistry) -> None:
    """Add ``POST /v1/rerank`` (and its aliases ``/rerank``, ``/v2/rerank``) to ``app``."""
    batchers: weakref.WeakKeyDictionary[ModelWorker, RerankBatcher] = weakref.WeakKeyDictionary()

    async def rerank(body: RerankRequest, request: Request) -> dict[str, Any]:
        unknown = body.unknown_fields()
        if unknown:  # an unknown name is no bad value: ignored, and said once in the log
            request.app.state.field_warnings.warn(
                request.url.path, {name: f"not a field the rerank route reads ({_FIELDS})" for name in unknown}
            )
        name = _reranker_name(models, body.model)
        documents = body.texts()
        if not documents:
            raise ApiError(400, "documents is an empty list: send at least one document to rank.", "documents")
        if not body.query:
            raise ApiError(400, "query is an empty string: send the text to rank the documents for.", "query")
        worker = await models.worker(name, request)
        batcher = batchers.get(worker)
        if batcher is None:
            batcher = batchers[worker] = RerankBatcher(worker)
        scores, tokens = await batcher.score(body.query, documents)
        worker.count(tokens, 0)
        results = []
        for doc in ranked(scores, documents, body.top_n):
            result: dict[str, Any] = {"index": doc.index, "relevance_score": doc.score}
            if body.return_documents:
                result["document"] = {"text": doc.document}
            results.append(result)
        return {
            "model": name,
            "object": "list",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": results,
        }

    for path in _ROUTES:
        app.add_api_route(path, rerank, methods=["POST"])


def _reranker_name(models: ModelRegistry, name: str | None) -> str:
    """``name`` when it is a served reranker, or the one served reranker when no name is given."""
    served = models.names("reranker")
    if not name:
        if len(served) != 1:
            listing = ", ".join(served) or "none"
            raise ApiError(400, f"model: Field required: name one of the served rerankers ({listing}).", "model")
        return served[0]
    require_kind(
        models,
        name,
        "reranker",
        refusal=f"The model {name!r} is not a reranker.",
        served="Rerankers served here",
        none_served="No reranker is served: start the server with a cross-encoder ONNX folder as --model "
        "(e.g. cross-encoder/ms-marco-MiniLM-L-6-v2).",
    )
    return name
