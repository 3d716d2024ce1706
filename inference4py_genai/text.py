"""TextGenerator: decoder-only text generation on onnxruntime-genai's native loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from inference4py.generation.config import GenerationConfig
from inference4py.generation.result import GenerationChunk, GenerationResult
from inference4py.tasks.base import ClosableTask
from inference4py.tasks.options import OUTPUT_FIELDS, RequestOptions
from inference4py.tasks.prompts import ChatOptions, Prompt, PromptEncoder
from inference4py.tokenization import Tokenizer, load_tokenizer
from inference4py_genai import _base
from inference4py_genai._guidance import genai_guidance
from inference4py_genai._runtime import load_genai_config, open_model

__all__ = ["TextGenerator", "GenaiTextGeneratorBuilder", "PHI3_TEMPLATE"]


# Phi-3 instruct's chat template (the fallback when a folder carries none).
PHI3_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] in ('system', 'user', 'assistant') %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)


class GenaiTextGeneratorBuilder(ChatOptions, _base.GenaiBuilder["TextGenerator"]):
    """Options of a :class:`TextGenerator` (the shared ones are in GenerationBuilder)."""

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


class TextGenerator(ClosableTask):
    """Generate text with a decoder-only model exported for onnxruntime-genai.

    The generation loop (KV cache, search, sampling) runs in onnxruntime-genai's
    C++; prompts, chat templates, streaming text and stop sequences are handled
    exactly as in :class:`inference4py.OnnxTextGenerator`, and the result is the
    same :class:`~inference4py.GenerationResult`.

    Example:
        >>> with TextGenerator.phi3Mini().max_new_tokens(200).build() as gen:   # doctest: +SKIP
        ...     print(gen.generate("What is ONNX?").text)
    """

    Builder = GenaiTextGeneratorBuilder

    # ------------------------------------------------------------------ presets
    @classmethod
    def builder(cls) -> GenaiTextGeneratorBuilder:
        """A builder with no model chosen: call ``model_id`` or ``model_path`` (a genai folder)."""
        return GenaiTextGeneratorBuilder()

    @classmethod
    def phi3Mini(cls) -> GenaiTextGeneratorBuilder:  # inference4j's name
        """Phi-3 Mini 4K Instruct (3.8B, int4), inference4j/phi-3-mini-4k-instruct (chat template on)."""
        return GenaiTextGeneratorBuilder(
            preset="phi3Mini",
            model_id="inference4j/phi-3-mini-4k-instruct",
            chat_template=PHI3_TEMPLATE,
            use_chat_template=True,
        )

    @classmethod
    def deepSeekR1_1_5B(cls) -> GenaiTextGeneratorBuilder:  # inference4j's name
        """DeepSeek-R1-Distill-Qwen-1.5B, inference4j/deepseek-r1-distill-qwen-1.5b (chat template on).

        The model thinks aloud in ``<think>...</think>`` before answering: leave room in max_new_tokens.
        """
        return GenaiTextGeneratorBuilder(
            preset="deepSeekR1_1_5B", model_id="inference4j/deepseek-r1-distill-qwen-1.5b", use_chat_template=True
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def _from_builder(cls, b: GenaiTextGeneratorBuilder) -> TextGenerator:
        return cls(b.resolve_folder(), b)

    def __init__(self, folder: Path, builder: GenaiTextGeneratorBuilder) -> None:
        self.folder = Path(folder)
        self._builder_repr = repr(builder)
        genai_config = load_genai_config(self.folder)
        self.tokenizer: Tokenizer = load_tokenizer(self.folder)
        defaults, totals, context = _base.genai_defaults(self.folder, genai_config)
        if not defaults.eos_token_id and self.tokenizer.eos_token_id is not None:
            defaults = defaults.replace(eos_token_id=(self.tokenizer.eos_token_id,))
        self._vocab_size = int(genai_config["model"].get("vocab_size") or self.tokenizer.vocab_size)
        self._planner = _base.GenaiPlanner(
            defaults,
            totals,
            builder.generation_overrides(),
            extra_eos=builder._eos,
            context=context,
            total_counts_prompt=True,
            model_eos=_base.genai_eos(genai_config),
        )
        self._processors = tuple(builder._processors)
        self._prompts = PromptEncoder(self.tokenizer, self.folder, builder, self._vocab_size)
        self._model = open_model(self.folder, genai_config, providers=builder._providers, threads=builder._threads)
        self._window = _base.genai_window(genai_config)

    @property
    def generation_config(self) -> GenerationConfig:
        """The defaults every call starts from (genai_config.json + builder options)."""
        return self._planner.base

    def __repr__(self) -> str:
        return f"TextGenerator(folder={str(self.folder)!r}, builder={self._builder_repr})"

    def _release(self) -> None:
        self._model = None

    # ------------------------------------------------------------------ prompts
    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The token ids a prompt becomes (after the chat template, when one applies).

        Raises:
            InvalidInputError: empty prompt, malformed messages, bad token ids.
        """
        return self._prompts.encode(prompt)

    # ------------------------------------------------------------------ generation
    def _call(self, prompt: Prompt, options: RequestOptions) -> _base.Call:
        self._check_open()
        options.refuse_speculation("onnxruntime-genai's loop")
        guidance = genai_guidance(options.output_options())
        ids = self.encode_prompt(prompt)
        return _base.Call(
            model=self._model,
            tokenizer=self.tokenizer,
            config=self._planner.for_request(len(ids), options.replace(**dict.fromkeys(OUTPUT_FIELDS))),
            feed=_base.feed_tokens(ids),
            prompt_ids=ids,
            model_eos=self._planner.model_eos,
            extra_processors=self._processors,
            skip=len(ids),
            guidance=guidance,
            window=self._window,
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
            options: the call's options as one typed :class:`~inference4py.tasks.options.RequestOptions`,
                as :meth:`inference4py.OnnxTextGenerator.generate` takes them; keywords given too replace
                its fields (``RequestOptions.of_call``).
            **overrides: generation options for this call only (``max_new_tokens=20``, ``temperature=0.7``...).

        Returns:
            GenerationResult with the text, generated ids, prompt and generated token counts, timings.

        Raises:
            InvalidInputError: empty or malformed prompt.
            PromptTooLongError: prompt + max_new_tokens exceed the model's context.
            ConfigurationError: invalid option values, or options genai cannot apply (min_p, speculative).
            InferenceError: onnxruntime-genai failed while generating.
        """
        started = time.perf_counter()
        call = self._call(prompt, RequestOptions.of_call(options, overrides))
        return _base.run_generation(call, started=started, on_token=on_token)

    def stream_chunks(
        self, prompt: Prompt, *, options: RequestOptions | None = None, **overrides: Any
    ) -> Iterator[GenerationChunk]:
        """The middle tier: :class:`GenerationChunk` objects with token ids and a finish reason.

        Options as :meth:`generate`'s.
        """
        return _base.stream_chunks(self._call(prompt, RequestOptions.of_call(options, overrides)))

    def stream(self, prompt: Prompt, *, options: RequestOptions | None = None, **overrides: Any) -> Iterator[str]:
        """Yield the completion's text piece by piece (complete UTF-8, no stop sequences)."""
        for chunk in self.stream_chunks(prompt, options=options, **overrides):
            if chunk.text:
                yield chunk.text


GenaiTextGeneratorBuilder._task = TextGenerator
