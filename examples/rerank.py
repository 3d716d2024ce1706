"""Rank documents by relevance to a query with a cross-encoder, in Python and through the server.

python examples/rerank.py                                                    # ms-marco-MiniLM-L-6-v2 from the Hub
python examples/rerank.py --model tests/fixtures/models/cross-encoder       # offline, the tests' tiny model

The same folder is then served (uvicorn on a free local port) and asked through POST /v1/rerank, the
route llama-server, Jina and Cohere clients call: the ranking is the same.
"""

import argparse
import socket
import threading
import time
from pathlib import Path

import httpx

from inference4py import OnnxReranker
from inference4py.serve import create_app, load_models

QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "The cat sat on the mat.",
    "France borders Spain, Italy, Germany and Belgium.",
    "Java is an island of Indonesia.",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None, help="hub id or local folder (default: the msMarcoMiniLML6V2 preset)")
    parser.add_argument("--top-n", type=int, default=3)
    args = parser.parse_args()

    builder = OnnxReranker.msMarcoMiniLML6V2()
    if args.model:
        builder = builder.model_path(args.model) if Path(args.model).is_dir() else builder.model_id(args.model)
    with builder.build() as reranker:
        print(f"query: {QUERY}")
        local = reranker.rerank(QUERY, DOCUMENTS, top_n=args.top_n)
        for doc in local:
            print(f"  {doc.score:8.4f}  [{doc.index}] {doc.document}")
        folder = reranker.folder

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(load_models([str(folder)])), port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    try:
        body = {"query": QUERY, "documents": DOCUMENTS, "top_n": args.top_n, "return_documents": True}
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/rerank", json=body, timeout=60).json()
    finally:
        server.should_exit = True
    print("POST /v1/rerank:")
    for result in answer["results"]:
        print(f"  {result['relevance_score']:8.4f}  [{result['index']}] {result['document']['text']}")
    same = [r["index"] for r in answer["results"]] == [d.index for d in local]
    print(f"same ranking through the server: {same}")


if __name__ == "__main__":
    main()
