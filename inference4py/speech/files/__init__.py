"""Whisper from the files people hold: faster-whisper's CTranslate2 folders and whisper.cpp's ggml files.

``whisper_folder(source)`` converts once (numpy + onnx, no torch) into a folder the native loop runs,
cached by the file's hash; ``convert_whisper(source, out)`` writes one where asked.
"""

from inference4py.speech.files.convert import convert_whisper, whisper_folder
from inference4py.speech.files.sources import find_whisper_file, is_whisper_file

__all__ = ["convert_whisper", "find_whisper_file", "is_whisper_file", "whisper_folder"]
