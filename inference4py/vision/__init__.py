"""Images for vision-language models: loading (pillow) and preprocessing (numpy) from the folder's config.

``load_image`` turns a path, encoded bytes, a PIL image or an ``H x W x 3`` uint8 array into an RGB
PIL image; ``load_image_processor(folder)`` reads the folder's image-processor configuration
(transformers' ``preprocessor_config.json`` or onnxruntime-genai's ``processor_config.json``) and
returns a callable that turns images into the vision encoder's inputs.
"""

from __future__ import annotations

from inference4py.vision.images import ImageInput, load_image
from inference4py.vision.processors import (
    SUPPORTED_PROCESSORS,
    ClipImageProcessor,
    Idefics3ImageProcessor,
    ImageBatch,
    ImageProcessor,
    Phi3ImageProcessor,
    load_image_processor,
)

__all__ = [
    "ImageInput",
    "load_image",
    "ImageBatch",
    "ImageProcessor",
    "ClipImageProcessor",
    "Phi3ImageProcessor",
    "Idefics3ImageProcessor",
    "load_image_processor",
    "SUPPORTED_PROCESSORS",
]
