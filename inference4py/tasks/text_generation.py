"""OnnxTextGenerator: decoder-only text generation on the native loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference4py.engine.decoder import DecoderRuntime
from inference4py.engine.pipeline import PipelineSpec, load_pipeline
from inference4py.engine.sessions import SessionOptions
from inference4py.errors import ConfigurationError, InvalidInputError
from inference4py.generation.config import GenerationConfig
from inference4py.generation.generate import collect, generate_chunks, stream_generate
from inference4py.generation.generator import Generator
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.generation.speculative import DraftModel, Speculation, check_same_vocabulary, resolve_speculative
from inference4py.tasks import chat_templates
from inference4py.tasks.base import GenerationBuilder, renamed
from inference4py.tasks.loader import GenerativeTask
from inference4py.tasks.options import RequestOptions
from inference4py.tasks.output_control import OutputControl, output_control
from inference4py.tasks.presets import Preset, PresetTable
from inference4py.tasks.prompts import ChatOptions, Prompt, PromptEncoder
from inference4py.tasks.request import PreparedRequest

if TYPE_CHECKING:
    from inference4py.tasks.batched import BatchedTextGenerator

__all__ = ["GENERATE_BATCH_ROWS", "OnnxTextGenerator", "TextGeneratorBuilder", "TEXT_PRESETS", "Prompt"]

#: Rows ``generate_batch`` decodes together at most (the rest wait for a free row).
GENERATE_BATCH_ROWS = 16


class TextGeneratorBuilder(ChatOptions, GenerationBuilder["OnnxTextGenerator"]):
    """Options of an :class:`OnnxTextGenerator` (see GenerationBuilder for the shared ones)."""

    def __init__(
        self,
        *,
        preset: str | None = None,
        model_id: str | None = None,
        chat_template: str | None = None,
        use_chat_template: bool = False,
    ) -> None:
        super().__init__(preset=preset, model_id=model_id, use_chat_template=use_chat_template or None)
        self._init_chat(chat_template, use_chat_template)
        self._fuse: bool | None = None  # None: fused when the optimizer recognises the graph
        self._speculative: Speculation | None = None
        self._gguf_file: str | None = None
        self._gguf_bits: int | None = None
        self._kv_cache = "float"

    def gguf_file(self, filename: str) -> TextGeneratorBuilder:
        """With ``model_id``: the GGUF file of that Hub repo to run (transformers' ``gguf_file``).

        The file is downloaded into the Hugging Face cache, converted once to an ONNX folder
        (docs/gguf.md) and loaded.  ``model_path("model.gguf")`` and ``model_path("pip:NAME")``
        take a local file or a GGUF published as a pip package instead.
        """
        if not isinstance(filename, str) or not filename.lower().endswith(".gguf"):
            raise ConfigurationError(f"gguf_file takes the name of a .gguf file in the repo, got {filename!r}.")
        self._gguf_file = filename
        return self

    def gguf_bits(self, bits: int) -> TextGeneratorBuilder:
        """Weights of a GGUF conversion: 32 (float32, exact), 16 (float16: exact for F16 files), 8 or 4 (lossy).

        Without it, every weight stays as the file holds it (docs/gguf.md): the default.
        """
        from inference4py.gguf.convert import BITS

        if bits not in BITS:
            raise ConfigurationError(f"gguf_bits takes one of {', '.join(map(str, BITS))}, got {bits!r}.")
        self._gguf_bits = int(bits)
        return self

    def resolve_folder(self) -> Path:
        """The local model folder; a GGUF source (file, ``pip:`` package, ``gguf_file``) is converted first."""
        source = self._gguf_source()
        if source is None:
            return super().resolve_folder()
        from inference4py.gguf.convert import gguf_folder

        return gguf_folder(source, bits=self._gguf_bits)

    def _gguf_source(self) -> Path | None:
        from inference4py.gguf.sources import PIP_PREFIX, gguf_from_hub, gguf_from_pip, is_gguf_source

        if self._model_id is not None and self._gguf_file is not None:
            return gguf_from_hub(
                self._model_id,
                self._gguf_file,
                revision=self._revision,
                token=self._token,
                local_files_only=self._local_files_only,
            )
        if self._gguf_file is not None:
            raise ConfigurationError("gguf_file names a file of a Hub repo: call model_id('org/name') as well.")
        where = self._model_path if self._model_path is not None else self._model_id
        if where is None or not is_gguf_source(where):
            return None
        if where.startswith(PIP_PREFIX):
            return gguf_from_pip(where)
        path = Path(where).expanduser()
        if not path.is_file():
            from inference4py.errors import ModelNotFoundError

            raise ModelNotFoundError(f"GGUF file '{where}' does not exist (resolved to '{path.absolute()}').")
        return path

    def speculative(self, value: Any = "prompt_lookup") -> TextGeneratorBuilder:
        """Speculative decoding for every generate() / stream() call unless a call says otherwise.

        ``"prompt_lookup"`` (the default), a :class:`~inference4py.generation.speculative.PromptLookup`
        or a :class:`~inference4py.generation.speculative.DraftModel`; None turns it off.  The
        output is the same as without it (docs/speculative.md); a call can pass ``speculative=None``.
        """
        self._speculative = resolve_speculative(value)
        return self

    def kv_cache(self, kind: str) -> TextGeneratorBuilder:
        """How the KV cache keeps keys and values: ``"float"`` (the graph's type, the default) or ``"int8"``.

        ``"int8"`` stores one byte per element (a quarter of float32), so a memory budget holds four
        times the positions; each attention layer's keys and values are quantized per channel with
        scales calibrated once on the model's float graph (:mod:`inference4py.optimize.kv_int8`).
        The graph must use GroupQueryAttention: a fused folder, a GGUF conversion or an
        onnxruntime-genai folder.  The first load calibrates and rewrites the graph (kept in
        ``INFERENCE4PY_CACHE``, keyed by the folder's hashes); outputs may differ slightly from
        the float cache's.

        Raises:
            ConfigurationError: an unknown kind; at build time, a graph without GroupQueryAttention.
        """
        from inference4py.kv_cache_types import KV_CACHE_TYPES

        if kind not in KV_CACHE_TYPES:
            raise ConfigurationError(f"kv_cache takes one of {', '.join(KV_CACHE_TYPES)}, got {kind!r}.")
        self._kv_cache = kind
        return self

    def fuse_attention(self, value: bool = True) -> TextGeneratorBuilder:
        """Whether to run a fused copy of the model (``inference4py optimize``), made on first use and cached.

        By default (not called) an optimum export runs fused when the optimizer recognises its
        graph, and as it is otherwise (logged once, never a failure).  ``fuse_attention()`` insists:
        a model whose attention cannot be fused is refused with the reason (UnsupportedModelError).
        ``fuse_attention(False)`` runs the graph as it is.

        An optimum export's attention becomes one onnxruntime ``GroupQueryAttention`` per layer,
        which runs ~1.4x faster on a CPU with the same outputs (docs/performance.md).  The first
        load fuses and checks the graph (a second for SmolLM2-135M, a minute for 0.5B, with a
        progress bar on a terminal); later loads reuse the copy kept in ``INFERENCE4PY_CACHE``
        (default ``~/.cache/inference4py``, beside the Hugging Face cache), keyed by the source
        files' hashes.  Graphs that are already fused (onnxruntime-genai folders) run as they are.
        """
        self._fuse = bool(value)
        return self


def _chat(template: str) -> dict[str, Any]:
    return {"chat_template": template, "use_chat_template": True}


#: OnnxTextGenerator's presets: the method name (inference4j's), the Hub repo, the builder's defaults.
TEXT_PRESETS = PresetTable(
    TextGeneratorBuilder,
    [
        Preset("gpt2", "inference4j/gpt2", "GPT-2 (124M), inference4j/gpt2."),
        Preset(
            "smolLM2",
            "inference4j/smollm2-360m-instruct",
            "SmolLM2-360M-Instruct, inference4j/smollm2-360m-instruct (chat template on).",
            _chat(chat_templates.CHATML_SMOL),
        ),
        Preset(
            "smolLM2_1_7B",
            "inference4j/smollm2-1.7b-instruct",
            "SmolLM2-1.7B-Instruct, inference4j/smollm2-1.7b-instruct (chat template on).",
            _chat(chat_templates.CHATML_SMOL),
        ),
        Preset(
            "qwen2",
            "inference4j/qwen2.5-1.5b-instruct",
            "Qwen2.5-1.5B-Instruct, inference4j/qwen2.5-1.5b-instruct (chat template on).",
            _chat(chat_templates.CHATML_QWEN),
        ),
        Preset(
            "tinyLlama",
            "inference4j/tinyllama-1.1b-chat",
            "TinyLlama-1.1B-Chat, inference4j/tinyllama-1.1b-chat (chat template on).",
            _chat(chat_templates.ZEPHYR),
        ),
        Preset(
            "gemma2",
            None,
            "Gemma 2 instruct. Gated on the Hub: set ``.model_id(...)`` (and a token) or ``.model_path(...)``.",
            _chat(chat_templates.GEMMA),
        ),
    ],
)


class OnnxTextGenerator(GenerativeTask[DecoderRuntime]):
    """Generate text with a decoder-only ONNX model (GPT-2, SmolLM2, Qwen2.5, Llama, ...).

    Example:
        >>> with OnnxTextGenerator.gpt2().max_new_tokens(40).build() as gen:   # doctest: +SKIP
        ...     print(gen.generate("Once upon a time").text)
    """

    Builder = TextGeneratorBuilder

    # ------------------------------------------------------------------ presets (TEXT_PRESETS)
    builder = TEXT_PRESETS.blank()
    gpt2 = TEXT_PRESETS.method("gpt2")
    smolLM2 = TEXT_PRESETS.method("smolLM2")  # inference4j's names
    smolLM2_1_7B = TEXT_PRESETS.method("smolLM2_1_7B")
    qwen2 = TEXT_PRESETS.method("qwen2")
    tinyLlama = TEXT_PRESETS.method("tinyLlama")
    gemma2 = TEXT_PRESETS.method("gemma2")

    @classmethod
    def from_pretrained(cls, model: str, **options: Any) -> OnnxTextGenerator:
        """Python-style construction: ``from_pretrained("inference4j/gpt2", max_new_tokens=50)``.

        ``model`` is a hub id or a local folder; every keyword is a builder method name
        (``stop_sequence`` and ``eos_token_id`` accept lists).
        """
        from pathlib import Path as _P

        from inference4py.gguf.sources import is_gguf_source

        b = cls.builder()
        b = b.model_path(model) if _P(model).is_dir() or is_gguf_source(model) else b.model_id(model)
        for name, value in options.items():
            method = getattr(b, name, None)
            if (
                name.startswith("_")
                or name in ("build", "resolve_folder", "session_options", "generation_overrides")
                or not callable(method)
            ):
                raise ConfigurationError(f"Unknown option {name!r} for OnnxTextGenerator.from_pretrained.")
            if name in ("stop_sequence", "eos_token_id") and isinstance(value, (list, tuple)):
                for v in value:
                    method(v)
            elif name == "chat_template" and value is True:
                method()
            else:
                method(value)
        return b.build()

    # ------------------------------------------------------------------ construction
    @classmethod
    def _from_builder(cls, b: TextGeneratorBuilder) -> OnnxTextGenerator:
        folder = b.resolve_folder()
        if b._fuse is None:  # the default: a cache hit reads nothing of the source graph
            from inference4py.optimize import auto_fused_folder

            folder = auto_fused_folder(folder)
        elif b._fuse and not _already_fused(folder):
            from inference4py.optimize import fused_model_folder

            folder = fused_model_folder(folder)
        if b._kv_cache == "int8":
            from inference4py.optimize.kv_int8 import int8_kv_folder

            folder = int8_kv_folder(folder)
        return cls(folder, b)

    def __init__(self, folder: Path, builder: TextGeneratorBuilder) -> None:
        super().__init__(folder, builder)  # the loader's steps (tasks/loader.py)
        self._speculative = builder._speculative
        self._prompts = PromptEncoder(
            self.tokenizer, self.folder, builder, self._runtime.vocab_size, context=self._runtime.max_positions
        )

    def _open_runtime(
        self, spec: PipelineSpec | None, config: dict[str, Any], options: SessionOptions
    ) -> DecoderRuntime:
        return DecoderRuntime(self._described(spec), config, options)

    def _context(self, config: dict[str, Any]) -> int | None:
        return self._runtime.max_positions

    def call_settings(self, prompt_tokens: int, **overrides: Any) -> GenerationConfig:
        """The settings a call with a prompt of ``prompt_tokens`` tokens runs with.

        ``max_new_tokens`` is what is left of the context after the prompt unless set. Raises
        :class:`~inference4py.errors.PromptTooLongError` when the prompt leaves no room, and
        :class:`~inference4py.errors.ConfigurationError` for an unknown option — before any model work.
        """
        return self._planner.for_call(prompt_tokens, overrides)

    # ------------------------------------------------------------------ prompts
    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The token ids a prompt becomes (after the chat template, when one applies).

        Raises:
            InvalidInputError: empty prompt, malformed messages, bad token ids.
        """
        self._check_open()
        return self._prompts.encode(prompt)

    # ------------------------------------------------------------------ generation
    @property
    def runtime(self) -> DecoderRuntime:
        """The loaded decoder, for the continuous-batching scheduler (raises once the model is closed)."""
        self._check_open()
        return self._runtime

    def prepare(self, prompt: Prompt, options: RequestOptions) -> PreparedRequest:
        """One request checked and made ready before any token: its ids, config and output control.

        The output constraint is compiled here, once per request.

        Raises:
            InvalidInputError, PromptTooLongError, ConfigurationError, UnsupportedModelError: as :meth:`generate`.
        """
        self._check_open()
        control = self._control(options)
        ids = self._prompts.encode(prompt, tools=control.tools, template_kwargs=options.chat_template_kwargs)
        harmony = self._prompts.harmony(prompt, ids, tools=control.tools, inline=options.reasoning == "inline")
        reasoning = None
        if harmony is not None:  # gpt-oss: its channels tell reasoning, answer and calls apart
            control = control.with_harmony(harmony)
        elif options.reasoning != "inline":
            reasoning = self._prompts.reasoning(prompt, ids, tools=control.tools)
        if reasoning is not None:
            markers, opened = reasoning
            control = control.with_reasoning(markers, opened=opened)
        return PreparedRequest(ids, self._planner.for_request(len(ids), options), control, self._processors)

    def _control(self, options: RequestOptions) -> OutputControl:
        """The request's output control (constraint or tools), checked and compiled."""
        given = options.output_options()
        if not given:
            return OutputControl()
        return output_control(given, template=self._prompts.tool_template, token_to_id=self.tokenizer.token_to_id)

    def stream_chunks(
        self, prompt: Prompt, *, options: RequestOptions | None = None, **overrides: Any
    ) -> Iterator[GenerationChunk]:
        """The middle tier: :class:`GenerationChunk` objects with token ids and a finish reason.

        Takes the same options as :meth:`generate`; with ``tools`` the chunks carry the raw
        text (tool-call markup included): parse it with ``tools.parse_tool_calls`` or use generate().
        With ``speculative``, the last chunk carries the draft counts (``chunk.summary``).
        """
        request = RequestOptions.of_call(options, overrides)
        prepared = self.prepare(prompt, request)
        return self._chunks(prepared, request.speculation(self._speculative))

    def request_chunks(self, prompt: Prompt, options: RequestOptions) -> Iterator[GenerationChunk]:
        """Deprecated: ``stream_chunks(prompt, options=options)``."""
        renamed("request_chunks(prompt, options)", "stream_chunks(prompt, options=options)")
        return self.stream_chunks(prompt, options=options)

    def _chunks(self, prepared: PreparedRequest, speculation: Speculation | None) -> Iterator[GenerationChunk]:
        ids, config = prepared.ids, prepared.config
        capacity = len(ids) + config.max_new_tokens
        state = self._runtime.new_state(1, capacity=capacity)
        extra = prepared.extra_processors(self.tokenizer)
        if speculation is None:
            return generate_chunks(state, ids, config, self.tokenizer, extra_processors=extra)
        self._refuse_final_phase("speculative decoding")
        from inference4py.generation.speculative import speculative_chunks

        draft_state = None
        if isinstance(speculation, DraftModel):
            draft = speculation.model
            if not isinstance(draft, OnnxTextGenerator):
                raise ConfigurationError(
                    f"DraftModel takes a loaded OnnxTextGenerator, got {type(draft).__name__}: "
                    "DraftModel(OnnxTextGenerator.builder().model_path(...).build())."
                )
            check_same_vocabulary(self.tokenizer, draft.tokenizer)
            draft_state = draft.runtime.new_state(1, capacity=capacity)
        return speculative_chunks(
            state,
            ids,
            config,
            self.tokenizer,
            speculation=speculation,
            draft_state=draft_state,
            extra_processors=extra,
        )

    def generate(
        self,
        prompt: Prompt,
        on_token: Callable[[str], None] | None = None,
        *,
        options: RequestOptions | None = None,
        **overrides: Any,
    ) -> GenerationResult:
        """Generate a completion.

        Args:
            prompt: text, chat messages (``[{"role": "user", "content": ...}]``) or token ids.
            on_token: called with each piece of text as soon as it is final.
            options: the call's options as one typed :class:`~inference4py.tasks.options.RequestOptions`
                (what the server and the CLI pass); keywords given too replace its fields.
            **overrides: generation options for this call only (``max_new_tokens=20``, ``temperature=0.7``,
                ``logprobs=True``...), and what the output may be (docs/structured-output.md):
                ``json_schema``, ``response_format``, ``regex``, ``grammar``, ``choices`` (one of them), and
                ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` (OpenAI's forms).
                ``speculative="prompt_lookup"`` or ``speculative=DraftModel(smaller_generator)`` drafts
                tokens and verifies them several per forward pass, with the same output (docs/speculative.md).
                They become one :class:`~inference4py.tasks.options.RequestOptions`.

        Returns:
            GenerationResult with the text, generated ids, counts and timings; with tools, the
            parsed ``tool_calls`` and ``finish_reason="tool_calls"`` when the model called one;
            with speculative, the drafted and accepted counts in ``result.speculative``.

        Raises:
            InvalidInputError: empty or malformed prompt, bad tools or tool_choice.
            PromptTooLongError: prompt + max_new_tokens exceed the model's context.
            ConfigurationError: invalid option values, a bad schema / regex / grammar.
            UnsupportedModelError: tools for a model whose chat template cannot render them.
        """
        started = time.perf_counter()
        request = RequestOptions.of_call(options, overrides)
        prepared = self.prepare(prompt, request)
        chunks = self._chunks(prepared, request.speculation(self._speculative))
        result = collect(chunks, prompt_tokens=len(prepared.ids), started=started, on_token=on_token)
        return prepared.finish(result)

    def generate_request(
        self, prompt: Prompt, options: RequestOptions, *, on_token: Callable[[str], None] | None = None
    ) -> GenerationResult:
        """Deprecated: ``generate(prompt, on_token, options=options)``."""
        renamed("generate_request(prompt, options)", "generate(prompt, options=options)")
        return self.generate(prompt, on_token, options=options)

    def generate_batch(
        self, prompts: Sequence[Prompt], *, options: RequestOptions | None = None, **overrides: Any
    ) -> list[GenerationResult]:
        """Generate for several prompts at once: one forward pass per step for the rows running together.

        The prompts run on the continuous-batching scheduler (:meth:`batched`), up to
        ``GENERATE_BATCH_ROWS`` at a time: each row has its own processors, sampler and seed, so
        each result is what ``generate()`` gives for that prompt alone (a seeded sampled one too).
        Returns one result per prompt, in order.  Takes the options of :meth:`generate` (but speculative).
        """
        self._check_open()
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise InvalidInputError("generate_batch needs a non-empty list of prompts.")
        request = RequestOptions.of_call(options, overrides)
        request.refuse_speculation("generate_batch")
        self._refuse_final_phase("generate_batch")
        rows = min(len(prompts), GENERATE_BATCH_ROWS)
        with self.batched(max_concurrent=rows, max_waiting=len(prompts), prefix_cache_mb=0, name="generate_batch") as b:
            return b.generate_batch(prompts, options=request.replace(speculative="off"))

    def generator(self, **overrides: Any) -> Generator:
        """A step-level :class:`~inference4py.generation.generator.Generator` over this model.

        ``max_new_tokens`` (from the builder or ``overrides``) limits each turn; use
        ``append_tokens`` / ``generate_next_token`` / ``rewind_to`` to drive it.
        """
        self._check_open()
        config = self._planner.for_call(1, overrides)
        return Generator(self._runtime.new_state(1), config, extra_processors=self._processors)

    def batched(self, **options: Any) -> BatchedTextGenerator:
        """Continuous batching over this model, for many concurrent callers (see :class:`BatchedTextGenerator`).

        Options: ``max_concurrent``, ``max_waiting``, ``kv_budget``, ``prefix_cache_mb``, ``timeout``,
        ``step_seconds``, ``memory`` (a :class:`~inference4py.generation.memory.MemoryBudget` shared with other models).
        """
        from inference4py.tasks.batched import BatchedTextGenerator

        self._refuse_final_phase("batched() (continuous batching)")
        return BatchedTextGenerator(self, **options)

    def _refuse_final_phase(self, what: str) -> None:
        """The paths that do not run a pipeline's ``final`` sessions refuse such a pipeline (no silent gap)."""
        final = [s.run for s in self._runtime.spec.steps if s.when == "final"]
        if final:
            raise ConfigurationError(
                f"{what} does not run the pipeline's final session(s) ({', '.join(final)}): call generate() or "
                "stream_chunks() per prompt, without speculative; the outputs are on result.final_outputs."
            )

    def chat_session(self, *, system_prompt: str | None = None, **overrides: Any) -> ChatSession:
        """A multi-turn conversation that keeps its KV cache between turns (see :class:`ChatSession`)."""
        self._check_open()
        return ChatSession(self, system_prompt=system_prompt, overrides=overrides)

    def stream(self, prompt: Prompt, *, options: RequestOptions | None = None, **overrides: Any) -> Iterator[str]:
        """Yield the completion's text piece by piece (complete UTF-8, no stop sequences)."""
        for chunk in self.stream_chunks(prompt, options=options, **overrides):
            if chunk.text:
                yield chunk.text


def _already_fused(folder: Path) -> bool:
    """onnxruntime-genai folders and folders whose decoder already uses GroupQueryAttention."""
    from inference4py.engine.graph_io import has_op

    if (folder / "genai_config.json").is_file():
        return True
    spec = load_pipeline(folder)
    return has_op(spec.path("decoder"), b"GroupQueryAttention")


class ChatSession:
    """A conversation whose KV cache survives between turns.

    Each turn renders the whole conversation with the chat template, keeps the
    cached tokens the new rendering shares with what the model has already
    seen (``rewind_to`` the common prefix), and prefills only the rest.  Greedy
    replies are the same as re-running the whole conversation from scratch.
    """

    def __init__(self, model: OnnxTextGenerator, *, system_prompt: str | None, overrides: Mapping[str, Any]) -> None:
        self._model = model
        self._overrides = dict(overrides)
        self.messages: list[dict[str, Any]] = []
        if system_prompt is not None:
            self.messages.append({"role": "system", "content": system_prompt})
        self._generator: Generator | None = None
        self.reused_tokens = 0  # cached tokens reused by the last turn (observable for tests / stats)

    def send(self, text: str, on_token: Callable[[str], None] | None = None) -> GenerationResult:
        """Add a user message, generate the reply, add it to the conversation and return it."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("The message is empty. Type something to send.")
        started = time.perf_counter()
        model = self._model
        model._check_open()
        messages = [*self.messages, {"role": "user", "content": text}]
        ids = model.encode_prompt(messages)
        config = model._planner.for_call(len(ids), self._overrides)
        if self._generator is None:
            self._generator = Generator(
                model._runtime.new_state(1, capacity=len(ids) + config.max_new_tokens),
                config,
                extra_processors=model._processors,
            )
        g = self._generator
        g.set_config(config)
        cached = g.sequence(0)
        common = 0
        for a, b in zip(cached, ids):
            if a != b:
                break
            common += 1
        common = min(common, len(ids) - 1)  # at least one new token to feed
        g.rewind_to(common)
        self.reused_tokens = common
        g.append_tokens(ids[common:])

        def tokens() -> Iterator[int]:
            while not g.is_done():
                yield g.generate_next_token()

        result = collect(
            stream_generate(tokens(), model.tokenizer, config),
            prompt_tokens=len(ids),
            started=started,
            on_token=on_token,
        )
        self.messages = [*messages, {"role": "assistant", "content": result.text}]
        return result


TextGeneratorBuilder._task = OnnxTextGenerator
