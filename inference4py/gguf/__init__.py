"""GGUF models on ONNX Runtime (the ``gguf`` extra): a llama.cpp file becomes an ordinary model folder.

- :mod:`~inference4py.gguf.reader`: the file's metadata and tensors (dequantized with the gguf package).
- :mod:`~inference4py.gguf.tokenizer`: the vocabulary as a tokenizers ``tokenizer.json``, the chat template.
- :mod:`~inference4py.gguf.graph`: the decoder as one ONNX graph in the library's fastest layout.
"""
