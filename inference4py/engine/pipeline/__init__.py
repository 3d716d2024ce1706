"""PipelineSpec: what sessions a model folder has, when they run, what state they carry.

The runtime knows HOW to run a pipeline, never WHAT model it runs.  A pipeline
description (JSON, ``version`` 1, schema in ``engine/pipeline_schema.json``) names
ONNX sessions, a flow (``init`` runs once before the loop, ``step`` every token,
``final`` after it), the state carried between steps (KV cache layout,
cross-attention cache, position ids), special tokens and generation defaults.
``metadata`` is for humans: ``model_type`` never selects code.

Where a folder's description comes from, in order (:func:`load_pipeline`):

1. ``inference4py.json`` in the folder, written by hand or saved from
   ``inference4py inspect``;
2. onnxruntime-genai's ``genai_config.json``, translated (:func:`translate_genai_config`);
3. detection (:func:`detect_pipeline`): the file names exporters use, else the
   inputs/outputs of every ``*.onnx`` file ("detect, don't declare").

All three produce a description that goes through the same path: the preset
named by ``pipeline.extends`` is expanded, the user's fields override it, then
everything is validated against the folder and the graphs' input/output names
(read without loading weights, see ``graph_io``).  The result is a fully
resolved :class:`PipelineSpec`; :meth:`PipelineSpec.describe` turns it back into
a description, which loads to the same spec.

One idea per module:

- ``spec``: the frozen dataclasses, the format's constants and the presets;
- ``folder``: the folder itself, its ``config.json`` and ``generation_config.json``;
- ``detect``: a description from the files present and the graphs' inputs/outputs;
- ``genai``: ``genai_config.json`` translated;
- ``parse``: each section of a description parsed and validated;
- ``resolve``: the three sources in order, preset expansion, checks against the graphs.
"""

from __future__ import annotations

from inference4py.engine.pipeline.folder import read_model_config
from inference4py.engine.pipeline.genai import translate_genai_config
from inference4py.engine.pipeline.resolve import detect_pipeline, load_pipeline, resolve_description

# Re-exported one by one (``X as X``): the dataclasses and the format's constants, importable from here as before.
from inference4py.engine.pipeline.spec import DESCRIPTION_FILE as DESCRIPTION_FILE
from inference4py.engine.pipeline.spec import FORMAT_VERSION as FORMAT_VERSION
from inference4py.engine.pipeline.spec import GENAI_CONFIG as GENAI_CONFIG
from inference4py.engine.pipeline.spec import GENERATION_KEYS as GENERATION_KEYS
from inference4py.engine.pipeline.spec import GRAPH_OPTIMIZATION_LEVELS as GRAPH_OPTIMIZATION_LEVELS
from inference4py.engine.pipeline.spec import KV_FORMATS as KV_FORMATS
from inference4py.engine.pipeline.spec import MAX_FLOW_STEPS as MAX_FLOW_STEPS
from inference4py.engine.pipeline.spec import PHASES as PHASES
from inference4py.engine.pipeline.spec import POSITION_STRATEGIES as POSITION_STRATEGIES
from inference4py.engine.pipeline.spec import PRESETS as PRESETS
from inference4py.engine.pipeline.spec import SESSION_OPTION_KEYS as SESSION_OPTION_KEYS
from inference4py.engine.pipeline.spec import STEP_MODES as STEP_MODES
from inference4py.engine.pipeline.spec import SUPPORTED_VERSIONS as SUPPORTED_VERSIONS
from inference4py.engine.pipeline.spec import CrossCacheSpec as CrossCacheSpec
from inference4py.engine.pipeline.spec import FlowStep as FlowStep
from inference4py.engine.pipeline.spec import KVCacheSpec as KVCacheSpec
from inference4py.engine.pipeline.spec import PipelineSpec as PipelineSpec
from inference4py.engine.pipeline.spec import PositionIdsSpec as PositionIdsSpec
from inference4py.engine.pipeline.spec import SessionSpec as SessionSpec
from inference4py.engine.pipeline.spec import StateSpec as StateSpec
from inference4py.engine.pipeline.spec import TokenSpec as TokenSpec
from inference4py.engine.pipeline.spec import schema_path as schema_path
from inference4py.engine.pipeline.spec import single_pass_refusal as single_pass_refusal

__all__ = [
    "SessionSpec",
    "FlowStep",
    "KVCacheSpec",
    "CrossCacheSpec",
    "PositionIdsSpec",
    "StateSpec",
    "TokenSpec",
    "PipelineSpec",
    "load_pipeline",
    "detect_pipeline",
    "resolve_description",
    "translate_genai_config",
    "read_model_config",
    "schema_path",
    "single_pass_refusal",
    "PRESETS",
    "FORMAT_VERSION",
    "DESCRIPTION_FILE",
]
