"""transformers (PyTorch, fp32, CPU): AutoModelForCausalLM / AutoModelForSeq2SeqLM .generate with a streamer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks.peers.common import SETTINGS, Peer, Timed


class _Clock:
    """A transformers streamer that only records when each new token arrives."""

    def __init__(self, timed: Timed, skip_first: bool) -> None:
        self.timed = timed
        self.skip = skip_first  # decoder-only: the first put() is the prompt

    def put(self, value) -> None:  # noqa: ANN001
        if self.skip:
            self.skip = False
            return
        for token in value.reshape(-1).tolist():
            self.timed.tick(token)

    def end(self) -> None:
        self.timed.ended = time.perf_counter()


def _kwargs(max_new_tokens: int, setting: str) -> dict[str, Any]:
    kw = {"max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens, **SETTINGS[setting]}
    seed = kw.pop("seed", None)
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    return kw


def load_with(spec: dict[str, Any], model_cls: Any, **load_kwargs: Any) -> Peer:
    """Load ``model_cls`` (a transformers or optimum class) and wrap its generate()."""
    import torch
    import transformers

    folder = Path(spec["folder"])
    seq2seq = bool(spec.get("seq2seq"))
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = model_cls.from_pretrained(folder, **load_kwargs)
    if hasattr(model, "eval"):
        model.eval()
    prompt = spec["prompt"]

    def encode() -> list[int]:
        if "messages" in prompt:
            return list(tok.apply_chat_template(prompt["messages"], add_generation_prompt=True, tokenize=True))
        return tok(prompt["text"])["input_ids"]

    def run_ids(ids: Sequence[int] | None, max_new_tokens: int, setting: str) -> Timed:
        timed = Timed(time.perf_counter())
        if ids is None:
            ids = encode()
        input_ids = torch.tensor([list(ids)], dtype=torch.long)
        kw = _kwargs(max_new_tokens, setting)
        if kw.get("num_beams", 1) == 1:
            kw["streamer"] = _Clock(timed, skip_first=not seq2seq)
        with torch.inference_mode():
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kw)
        if "streamer" not in kw:  # beam search: tokens are known at the end only
            new = out[0, (1 if seq2seq else input_ids.shape[1]):].tolist()
            for t in new:
                timed.tick(t)
            timed.ended = time.perf_counter()
        timed.prompt_tokens = len(ids)
        return timed

    return Peer(generate=lambda n, s: run_ids(None, n, s), generate_ids=run_ids, prompt_ids=encode,
                info={"transformers": transformers.__version__, "torch": torch.__version__,
                      "torch_threads": torch.get_num_threads()})


def load(spec: dict[str, Any]) -> Peer:
    import torch

    import transformers

    cls = transformers.AutoModelForSeq2SeqLM if spec.get("seq2seq") else transformers.AutoModelForCausalLM
    return load_with(spec, cls, torch_dtype=torch.float32)
