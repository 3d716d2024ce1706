"""OpenAI's embeddings route for served sentence encoders: ``POST /v1/embeddings``.

The request is OpenAI's: ``input`` (a string or a list of strings), ``model``, ``encoding_format``
(``"float"``, or ``"base64"``: the little-endian float32 bytes, which the ``openai`` client asks
for by default and decodes), ``dimensions`` (keep the first N values, L2-normalized again, as
OpenAI's text-embedding-3 models do; meaningful for Matryoshka-trained models) and ``user``
(ignored). Token-id inputs are refused: send the text. Texts longer than the model's
``max_seq_length`` are truncated, as sentence-transformers does. The model's worker runs
:meth:`OnnxEmbedder.tokenize` and :meth:`OnnxEmbedder.embed_tokenized` on its own thread; usage
counts the tokens embedded, special tokens included.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from fastapi import FastAPI, Request

from inference4py.serve.dispatch import require_kind
from inference4py.serve.protocol import ApiError, EmbeddingRequest
from inference4py.serve.registry import ModelRegistry
from inference4py.serve.worker import ModelWorker
from inference4py.tasks.embedding import OnnxEmbedder

__all__ = ["add_embedding_routes"]


def add_embedding_routes(app: FastAPI, models: ModelRegistry) -> None:
    """Add ``POST /v1/embeddings`` to ``app``."""

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingRequest, request: Request) -> dict[str, Any]:
        unknown = body.unknown_fields()
        if unknown:  # an unknown name is no bad value: ignored, and said once in the log
            why = "not a field /v1/embeddings reads (model, input, encoding_format, dimensions, user)"
            request.app.state.field_warnings.warn("/v1/embeddings", {name: why for name in unknown})
        worker = await _embedding_worker(models, body.model, request)
        texts = _texts(body.input)
        model: OnnxEmbedder = worker.model
        dimensions = body.dimensions

        def job() -> tuple[list[list[int]], np.ndarray]:
            if dimensions is not None and dimensions > model.dimension:
                raise ApiError(
                    400,
                    f"dimensions={dimensions} is more than this model's {model.dimension}: "
                    f"ask for at most {model.dimension}, or leave dimensions out.",
                    "dimensions",
                )
            ids = model.tokenize(texts)
            return ids, model.embed_tokenized(ids, dimensions=dimensions)

        ids, vectors = await worker.run(job)
        tokens = sum(len(row) for row in ids)
        worker.count(tokens, 0)
        data = [
            {"object": "embedding", "index": i, "embedding": _encode(vector, body.encoding_format)}
            for i, vector in enumerate(vectors)
        ]
        return {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


async def _embedding_worker(models: ModelRegistry, name: str, request: Request) -> ModelWorker:
    require_kind(
        models,
        name,
        "embedding",
        refusal=f"The model {name!r} is not an embedding model.",
        served="Embedding models served here",
        none_served="No embedding model is served: start the server with a sentence-transformers ONNX folder as --model.",
    )
    return await models.worker(name, request)


def _texts(value: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    if not items:
        raise ApiError(400, "input is an empty list: send at least one string to embed.", "input")
    if not all(isinstance(item, str) for item in items):
        raise ApiError(
            400,
            "input as token ids is not supported here (ids depend on the model's tokenizer): send the text as a "
            "string or a list of strings.",
            "input",
        )
    for i, text in enumerate(items):
        if not text:
            where = "input" if isinstance(value, str) else f"input[{i}]"
            raise ApiError(400, f"{where} is an empty string: every input must have some text.", "input")
    return [str(item) for item in items]


def _encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]
