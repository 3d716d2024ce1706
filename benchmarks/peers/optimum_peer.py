"""optimum: ORTModelForCausalLM / ORTModelForSeq2SeqLM (onnxruntime, with optimum's own IO binding choice)."""

from __future__ import annotations

from typing import Any

from benchmarks.peers.common import Peer
from benchmarks.peers.transformers_peer import load_with


def load(spec: dict[str, Any]) -> Peer:
    import optimum.onnxruntime as ortm

    cls = ortm.ORTModelForSeq2SeqLM if spec.get("seq2seq") else ortm.ORTModelForCausalLM
    peer = load_with(spec, cls, provider="CPUExecutionProvider")
    peer.info["optimum_class"] = cls.__name__
    return peer
