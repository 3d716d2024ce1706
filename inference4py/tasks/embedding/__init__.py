"""OnnxEmbedder: sentence embeddings from a sentence-transformers model exported to ONNX.

One pass, no generation loop: tokenize (special tokens added, truncated to the model's
``max_seq_length``), run the encoder on a right-padded batch with its attention mask, pool the
token vectors, L2-normalize when the model says so.  Everything comes from the folder, the way
``SentenceTransformer(folder)`` reads it:

- the graph: ``model.onnx`` or ``onnx/model.onnx`` (``model_<variant>.onnx`` with ``variant``);
  its ``last_hidden_state`` (or ``token_embeddings``) output is pooled here, a
  ``sentence_embedding`` output is taken as already pooled;
- ``modules.json``: the modules in order -- Transformer, Pooling, optionally Normalize;
- the Pooling module's ``config.json`` (``1_Pooling/config.json``): ``pooling_mode`` (current
  format: a name or a list) or the ``pooling_mode_*`` booleans (older format), several modes
  concatenated in sentence-transformers' order;
- ``sentence_bert_config.json``: ``max_seq_length`` (else the tokenizer's ``model_max_length``,
  else ``max_position_embeddings``) and ``do_lower_case``;
- the tokenizer from ``tokenizer.json`` (:func:`inference4py.tokenization.load_tokenizer`).

One idea per module: ``folder`` (what the folder's files say), ``pooling`` (numpy pooling and
normalization), ``model`` (:class:`OnnxEmbedder` and its builder).

A folder without ``modules.json`` (a bare ONNX export of an encoder) gets mean pooling and no
normalization unless the builder says otherwise.  Texts are tokenized as given: sentence-transformers
before 5.x stripped surrounding whitespace first (a difference only for tokenizers that keep spaces).

Example:
    >>> from inference4py import OnnxEmbedder
    >>> with OnnxEmbedder.allMiniLML6V2().build() as embedder:   # doctest: +SKIP
    ...     vectors = embedder.embed(["A cat sits on the mat.", "A dog plays in the garden."])
    >>> vectors.shape                                                 # doctest: +SKIP
    (2, 384)
"""

from inference4py.tasks.embedding.folder import is_embedding_model as is_embedding_model
from inference4py.tasks.embedding.model import EmbedderBuilder as EmbedderBuilder
from inference4py.tasks.embedding.model import OnnxEmbedder as OnnxEmbedder
from inference4py.tasks.embedding.pooling import POOLING_MODES as POOLING_MODES
from inference4py.tasks.embedding.pooling import l2_normalize as l2_normalize
from inference4py.tasks.embedding.pooling import pool as pool

__all__ = ["OnnxEmbedder", "EmbedderBuilder", "POOLING_MODES", "is_embedding_model", "l2_normalize", "pool"]
