"""The floor: a bare numpy + onnxruntime IO-binding loop over the same graph, no library around it.

Decoder-only graphs with separate past/present (optimum exports): past inputs are bound to
the previous step's present OrtValues, step logits go to one pre-allocated [1, 1, vocab]
buffer.  genai graphs (GroupQueryAttention, ``past_present_share_buffer``): one KV buffer
per tensor of the final length, bound as both past and present.  Encoder-decoder graphs
(optimum's merged decoder): the encoder runs once, the cross-attention KV of the first
decoder step is kept.  Tokens are chosen in numpy: argmax, or temperature/top-k/top-p.
No detokenization, no stop strings: this is the least per-token work possible.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.peers.common import SETTINGS, Peer, Timed, Unsupported, eos_ids, prompt_encoder, read_json

_NEG_INF = np.float32(-np.inf)


def _session(path: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


class _Chooser:
    """Argmax, or sampling with temperature, top-k and top-p (transformers' order), EOS masked."""

    def __init__(self, setting: str, eos: Sequence[int]) -> None:
        s = SETTINGS[setting]
        if s.get("num_beams", 1) > 1:
            raise Unsupported("the bare loop has no beam search")
        self.sample = s["do_sample"]
        self.temperature = np.float32(s.get("temperature", 1.0))
        self.top_k = int(s.get("top_k", 0))
        self.top_p = float(s.get("top_p", 1.0))
        self.rng = np.random.default_rng(s.get("seed"))
        self.eos = np.asarray(list(eos), dtype=np.int64)

    def __call__(self, logits: np.ndarray) -> int:  # logits: [vocab] float32, may be modified
        logits[self.eos] = _NEG_INF  # min_new_tokens == max_new_tokens: EOS never allowed
        if not self.sample:
            return int(logits.argmax())
        scores = logits / self.temperature
        idx = np.argpartition(scores, -self.top_k)[-self.top_k:]
        vals = scores[idx]
        order = np.argsort(-vals, kind="stable")
        idx, vals = idx[order], vals[order]
        probs = np.exp(vals - vals[0])
        probs /= probs.sum()
        keep = max(1, int(np.searchsorted(np.cumsum(probs), self.top_p) + 1))
        probs = probs[:keep] / probs[:keep].sum()
        return int(idx[min(int(np.searchsorted(np.cumsum(probs), self.rng.random())), keep - 1)])


class DecoderLoop:
    def __init__(self, folder: Path) -> None:
        import onnxruntime as ort

        self.ort = ort
        genai = read_json(folder / "genai_config.json").get("model")
        name = genai["decoder"]["filename"] if genai else next(
            n for n in ("model.onnx", "decoder_model_merged.onnx") if (folder / n).is_file())
        self.sess = _session(folder / name)
        ins = {i.name: i for i in self.sess.get_inputs()}
        outs = {o.name: o for o in self.sess.get_outputs()}
        self.past = sorted((n for n in ins if n.startswith("past_key_values.")), key=_layer_key)
        self.present = [n.replace("past_key_values", "present") for n in self.past]
        self.has_pos = "position_ids" in ins
        self.has_mask = "attention_mask" in ins
        self.branch = "use_cache_branch" in ins
        self.keep = "num_logits_to_keep" in ins  # `inference4py optimize`'s graphs: the last position's logits only
        # genai folders say so in genai_config.json; any GroupQueryAttention graph (e.g. after
        # `inference4py optimize`) accepts one buffer bound as past and present
        self.shared = (read_json(folder / "genai_config.json").get("search", {}).get("past_present_share_buffer", False)
                       if genai else any(n.op_type == "GroupQueryAttention" for n in _graph_nodes(folder / name)))
        config = read_json(folder / "config.json")
        shape = ins[self.past[0]].shape  # [batch, kv_heads, past, head_dim]; dims may be symbolic
        self.kv_heads = shape[1] if isinstance(shape[1], int) else (
            genai["decoder"]["num_key_value_heads"] if genai else config.get("num_key_value_heads"))
        self.head = shape[3] if isinstance(shape[3], int) else (
            genai["decoder"]["head_size"] if genai else config.get("head_dim") or (
                config["hidden_size"] // config["num_attention_heads"]))
        self.kv_dtype = np.float16 if "float16" in ins[self.past[0]].type else np.float32
        self.vocab = outs["logits"].shape[-1]
        self.eos = eos_ids(folder)

    def run(self, ids: Sequence[int], max_new_tokens: int, setting: str, timed: Timed) -> None:
        ort, sess = self.ort, self.sess
        choose = _Chooser(setting, self.eos)
        n = len(ids)
        total = n + max_new_tokens
        mask = np.ones((1, total), dtype=np.int64)
        positions = np.arange(total, dtype=np.int64)[None, :]  # [1, total]
        binding = sess.io_binding()
        binding.bind_output("logits", "cpu")  # first, so get_outputs() is [logits, present.*]
        if self.shared:
            bufs = [ort.OrtValue.ortvalue_from_numpy(np.zeros((1, self.kv_heads, total, self.head), self.kv_dtype))
                    for _ in self.past]
            for p, q, buf in zip(self.past, self.present, bufs):
                binding.bind_ortvalue_input(p, buf)
                binding.bind_ortvalue_output(q, buf)
        else:
            empty = np.zeros((1, self.kv_heads, 0, self.head), self.kv_dtype)
            for p in self.past:
                binding.bind_cpu_input(p, empty)
            for q in self.present:
                binding.bind_output(q, "cpu")
        # prefill: [1, n]
        binding.bind_cpu_input("input_ids", np.asarray([ids], dtype=np.int64))
        if self.has_mask:
            binding.bind_cpu_input("attention_mask", mask[:, :n])
        if self.has_pos:
            binding.bind_cpu_input("position_ids", positions[:, :n])
        if self.branch:
            binding.bind_cpu_input("use_cache_branch", np.array([False]))
        if self.keep:
            binding.bind_cpu_input("num_logits_to_keep", np.array(1, dtype=np.int64))
        sess.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        logits = outputs[0].numpy()[0, -1].copy()
        # steps: [1, 1]
        step_logits = np.empty((1, 1, self.vocab), dtype=np.float32)
        binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(step_logits))
        step_ids = np.empty((1, 1), dtype=np.int64)
        if self.branch:
            binding.bind_cpu_input("use_cache_branch", np.array([True]))
        for i in range(max_new_tokens):
            token = choose(logits)
            timed.tick(token)
            if i + 1 == max_new_tokens:
                break
            cur = n + i
            step_ids[0, 0] = token
            binding.bind_cpu_input("input_ids", step_ids)
            if self.has_mask:
                binding.bind_cpu_input("attention_mask", mask[:, :cur + 1])
            if self.has_pos:
                binding.bind_cpu_input("position_ids", positions[:, cur:cur + 1])
            if not self.shared:
                for p, value in zip(self.past, outputs[1:]):
                    binding.bind_ortvalue_input(p, value)
                for q in self.present:
                    binding.bind_output(q, "cpu")
            sess.run_with_iobinding(binding)
            if not self.shared:
                outputs = binding.get_outputs()  # logits first (bound first), then present.*
            logits = step_logits[0, 0]


class Seq2SeqLoop:
    """Encoder once, then optimum's merged decoder with use_cache_branch."""

    def __init__(self, folder: Path) -> None:
        import onnxruntime as ort

        self.ort = ort
        if not (folder / "decoder_model_merged.onnx").is_file():
            raise Unsupported("the bare seq2seq loop needs encoder_model.onnx + decoder_model_merged.onnx")
        self.enc = _session(folder / "encoder_model.onnx")
        self.dec = _session(folder / "decoder_model_merged.onnx")
        ins = {i.name: i for i in self.dec.get_inputs()}
        self.self_past = sorted((n for n in ins if n.startswith("past_key_values.") and ".decoder." in n), key=_layer_key)
        self.cross_past = sorted((n for n in ins if n.startswith("past_key_values.") and ".encoder." in n), key=_layer_key)
        config = read_json(folder / "config.json")
        gen = read_json(folder / "generation_config.json")
        self.start = gen.get("decoder_start_token_id", config.get("decoder_start_token_id"))
        self.heads = ins[self.self_past[0]].shape[1]
        self.head = ins[self.self_past[0]].shape[3]
        self.vocab = {o.name: o for o in self.dec.get_outputs()}["logits"].shape[-1]
        self.eos = eos_ids(folder)

    def run(self, ids: Sequence[int], max_new_tokens: int, setting: str, timed: Timed) -> None:
        ort = self.ort
        choose = _Chooser(setting, self.eos)
        enc_ids = np.asarray([ids], dtype=np.int64)
        enc_mask = np.ones_like(enc_ids)
        hidden = self.enc.run(None, {"input_ids": enc_ids, "attention_mask": enc_mask})[0]
        binding = self.dec.io_binding()
        binding.bind_cpu_input("encoder_attention_mask", enc_mask)
        binding.bind_cpu_input("encoder_hidden_states", hidden)
        empty = np.zeros((1, self.heads, 0, self.head), np.float32)
        for p in self.self_past + self.cross_past:
            binding.bind_cpu_input(p, empty)
        binding.bind_cpu_input("use_cache_branch", np.array([False]))
        step_ids = np.full((1, 1), self.start, dtype=np.int64)
        binding.bind_cpu_input("input_ids", step_ids)
        binding.bind_output("logits", "cpu")
        present_self = [p.replace("past_key_values", "present") for p in self.self_past]
        present_cross = [p.replace("past_key_values", "present") for p in self.cross_past]
        for q in present_self + present_cross:
            binding.bind_output(q, "cpu")
        self.dec.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        logits = outputs[0].numpy()[0, -1].copy()
        k = len(present_self)
        for p, value in zip(self.cross_past, outputs[1 + k:]):
            binding.bind_ortvalue_input(p, value)  # frozen cross-attention KV
        selfs = outputs[1:1 + k]
        # Later steps: only logits and the self-attention presents (the cross ones are dummies).
        binding.clear_binding_outputs()
        step_logits = np.empty((1, 1, self.vocab), dtype=np.float32)
        binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(step_logits))
        binding.bind_cpu_input("use_cache_branch", np.array([True]))
        for i in range(max_new_tokens):
            token = choose(logits)
            timed.tick(token)
            if i + 1 == max_new_tokens:
                break
            step_ids[0, 0] = token
            binding.bind_cpu_input("input_ids", step_ids)
            for p, value in zip(self.self_past, selfs):
                binding.bind_ortvalue_input(p, value)
            for q in present_self:
                binding.bind_output(q, "cpu")
            self.dec.run_with_iobinding(binding)
            selfs = binding.get_outputs()[1:]
            logits = step_logits[0, 0]


def _graph_nodes(path: Path) -> list:
    import onnx

    return list(onnx.load(str(path), load_external_data=False).graph.node)


def _layer_key(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return int(parts[1]), name


def load(spec: dict[str, Any]) -> Peer:
    folder = Path(spec["folder"])
    loop: Any = Seq2SeqLoop(folder) if spec.get("seq2seq") else DecoderLoop(folder)
    encode = prompt_encoder(folder, spec["prompt"])

    def run_ids(ids: Sequence[int] | None, max_new_tokens: int, setting: str) -> Timed:
        timed = Timed(time.perf_counter())
        if ids is None:
            ids = encode()
        loop.run(list(ids), max_new_tokens, setting, timed)
        timed.ended = time.perf_counter()
        timed.prompt_tokens = len(ids)
        return timed

    return Peer(generate=lambda n, s: run_ids(None, n, s), generate_ids=run_ids, prompt_ids=encode,
                info={"shared_kv": bool(getattr(loop, "shared", False))})
