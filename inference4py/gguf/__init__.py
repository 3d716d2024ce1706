"""GGUF models on ONNX Runtime (the ``gguf`` extra): a llama.cpp file becomes an ordinary model folder.

- :mod:`~inference4py.gguf.reader`: the file's metadata and tensors (raw blocks, or dequantized with the gguf package).
- :mod:`~inference4py.gguf.blocks`: ggml block types as codes, scales and minimums, and how each maps onto
  onnxruntime's MatMulNBits as stored; :mod:`~inference4py.gguf.store`: initializers written one at a time.
- :mod:`~inference4py.gguf.tokenizer`: the vocabulary as a tokenizers ``tokenizer.json``, the chat template.
- :mod:`~inference4py.gguf.graph`: the decoder as one ONNX graph in the library's fastest layout
  (:mod:`~inference4py.gguf.archs`: one entry per architecture; :mod:`~inference4py.gguf.hyper`:
  its shape and config.json; :mod:`~inference4py.gguf.ffn`: the gated MLP; :mod:`~inference4py.gguf.moe`:
  mixture-of-experts layers, the router and the chosen experts' products; :mod:`~inference4py.gguf.mla`:
  DeepSeek-V2's latent attention, its cache holding the latent and the rope key).
- :mod:`~inference4py.gguf.convert`: the cached, atomic conversion; :mod:`~inference4py.gguf.sources`:
  where a file comes from (a path, a Hub repo, a pip package).
"""
