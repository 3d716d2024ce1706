"""Prompts of decoder-only models: str, chat messages or token ids -> token ids.

Shared by both backends (OnnxTextGenerator and inference4py_genai's
TextGenerator), with the builder options that configure it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from inference4py.errors import ConfigurationError, InvalidInputError, PromptTooLongError
from inference4py.tasks.harmony import HarmonyTurn, harmony_opening
from inference4py.tokenization import Tokenizer
from inference4py.tokenization.harmony import harmony_markers

__all__ = ["ChatOptions", "PromptEncoder", "Prompt"]

Message = Mapping[str, Any]
Prompt = str | Sequence[Message] | Sequence[int]
C = TypeVar("C", bound="ChatOptions")


class ChatOptions:
    """Builder mixin: chat template and system prompt options."""

    def _init_chat(self, chat_template: str | None, use_chat_template: bool) -> None:
        self._preset_template = chat_template  # fallback when the folder has no template
        self._chat_template: str | None = None  # set by the user: always wins
        self._use_chat_template = use_chat_template
        self._system_prompt: str | None = None

    def chat_template(self: C, template: str | None = None, *, render_strings: bool = True) -> C:
        """Render str prompts through a chat template.

        Args:
            template: a Jinja template; None uses the model's own (tokenizer_config.json
                or chat_template.jinja).
            render_strings: False keeps str prompts as they are: ``template`` then only renders
                chat messages (and tools), as a server's /v1/completions expects.
        """
        if template is not None and (not isinstance(template, str) or not template.strip()):
            raise ConfigurationError(
                "chat_template needs a Jinja template string (or no argument for the model's own)."
            )
        if template is not None:
            self._chat_template = template
        if render_strings:
            self._use_chat_template = True
        return self

    def system_prompt(self: C, text: str) -> C:
        """A system message put before the user's prompt (chat models)."""
        if not isinstance(text, str):
            raise ConfigurationError("system_prompt must be a string.")
        self._system_prompt = text
        return self


class PromptEncoder:
    """Encodes prompts exactly as transformers would for the same files.

    A str goes through the chat template only when one is switched on; chat
    messages always do; token ids are checked against the vocabulary and used as-is.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        folder: Path,
        options: ChatOptions,
        vocab_size: int | None,
        *,
        context: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.context = context
        self.folder = folder
        self.vocab_size = vocab_size
        self.system_prompt = options._system_prompt
        self.use_template = options._use_chat_template
        # The user's template wins; then the folder's own (the model author's); the preset's is the fallback.
        self.template = options._chat_template or tokenizer.chat_template or options._preset_template
        # With tools: the user's template, else the model's "tool_use" one when it names one.
        self.tool_template = options._chat_template or tokenizer.chat_templates.get("tool_use") or self.template
        if self.use_template and not self.template:
            raise ConfigurationError(
                f"A chat template was requested but {folder} has none (no chat_template in "
                "tokenizer_config.json, no chat_template.jinja).",
                fix="chat_template",
            )

    def encode(
        self,
        prompt: Prompt,
        *,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The token ids of ``prompt``; ``tools`` (checked ones) are rendered by the chat template.

        ``template_kwargs`` are more variables for the chat template, when one applies.

        Raises:
            InvalidInputError: empty prompt, malformed messages, ids outside the vocabulary,
                or token ids given together with tools.
        """
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidInputError("The prompt is empty. Pass some text, a list of chat messages or token ids.")
            if self.use_template or tools is not None:
                return self.render([{"role": "user", "content": prompt}], tools=tools, template_kwargs=template_kwargs)
            ids = self.tokenize(prompt)
            if not ids:
                raise InvalidInputError("The prompt encodes to no tokens. Pass some text.")
            return ids
        if isinstance(prompt, (list, tuple)):
            if not prompt:
                raise InvalidInputError("The prompt is an empty list. Pass text, chat messages or token ids.")
            if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
                if tools is not None:
                    raise InvalidInputError(
                        "Tools are rendered by the chat template: pass text or chat messages with tools, not token ids."
                    )
                vocab = self.vocab_size
                bad = [t for t in prompt if t < 0 or (vocab is not None and t >= vocab)]
                if bad:
                    raise InvalidInputError(
                        f"Token id(s) {bad[:5]} are outside the model's vocabulary (0..{(vocab or 0) - 1})."
                    )
                return list(prompt)
            if all(isinstance(m, Mapping) for m in prompt):
                _refuse_images(prompt)
                return self.render(list(prompt), tools=tools, template_kwargs=template_kwargs)
        raise InvalidInputError(
            f"Unsupported prompt of type {type(prompt).__name__}: pass a str, a list of "
            "{'role': ..., 'content': ...} messages, or a list of token ids."
        )

    def tokenize(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """``text``'s token ids, refused before any tokenizing when it cannot fit the context.

        A token stands for at most ``tokenizer.max_token_chars`` characters, so a text with more
        non-whitespace characters than the context times that cannot fit (whitespace is not counted:
        some tokenizers fold runs of it). Refusing it here costs a count, not the seconds a
        multi-megabyte text takes to tokenize.

        Raises:
            PromptTooLongError: the text cannot fit the model's context.
        """
        self._refuse_unfit([text])
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def _refuse_unfit(self, texts: Sequence[str]) -> None:
        """Raise PromptTooLongError when ``texts`` together surely hold more tokens than the context."""
        size = sum(len(t) for t in texts)
        if self.context is None or size <= self.context:
            return
        visible = size - sum(t.count(c) for t in texts for c in " \t\n\r")
        most = self.context * self.tokenizer.max_token_chars
        if visible > most:
            raise PromptTooLongError(
                f"The prompt has {size} characters: more tokens than the model's context of {self.context} "
                f"tokens can hold (a token is at most {self.tokenizer.max_token_chars} characters here). "
                "Shorten the prompt."
            )

    def reasoning(
        self, prompt: Prompt, ids: Sequence[int], *, tools: list[dict[str, Any]] | None = None
    ) -> tuple[tuple[str, str], bool] | None:
        """``(markers, opened)`` when a templated prompt's answer may hold a reasoning block, else None.

        The chat template must write ``<think>`` and ``</think>`` (Qwen3, DeepSeek-R1, SmolLM3...);
        ``opened`` says the rendered prompt ends inside the block (the template wrote ``<think>``). A
        plain prompt not run through the template, or token ids, are the caller's own: None.
        """
        templates = (self.template or "") + (self.tool_template or "")
        if not all(marker in templates for marker in _THINK):
            return None
        if not self._templated(prompt, tools):
            return None
        tail = self.tokenizer.decode(list(ids[-8:]), skip_special_tokens=False)
        return _THINK, tail.rstrip().endswith(_THINK[0])

    def harmony(
        self, prompt: Prompt, ids: Sequence[int], *, tools: list[dict[str, Any]] | None = None, inline: bool = False
    ) -> HarmonyTurn | None:
        """How a templated prompt opened a turn the model writes in OpenAI's Harmony format, else None.

        The model writes Harmony when its vocabulary has Harmony's markers (gpt-oss; see
        :func:`~inference4py.tokenization.harmony.harmony_markers`); the turn is then told apart by its
        channels, from what the prompt's last ``<|start|>`` opened (gpt-oss's template: ``assistant``).
        ``inline`` leaves the reasoning in the answer text. A plain prompt not run through the template,
        or token ids, are the caller's own: None.
        """
        if not harmony_markers(self.tokenizer.token_to_id) or not self._templated(prompt, tools):
            return None
        tail = self.tokenizer.decode(list(ids[-16:]), skip_special_tokens=False)
        return HarmonyTurn(harmony_opening(tail), inline=inline)

    def _templated(self, prompt: Prompt, tools: list[dict[str, Any]] | None) -> bool:
        """Whether ``prompt`` goes through the chat template (the turn it opens is then the template's)."""
        if isinstance(prompt, str):
            return self.use_template or tools is not None
        return isinstance(prompt, (list, tuple)) and bool(prompt) and isinstance(prompt[0], Mapping)

    def render(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Chat messages through the template, then tokenized without added special tokens."""
        # a conversation that cannot fit is refused before the template copies its text
        self._refuse_unfit(
            [m["content"] for m in messages if isinstance(m, Mapping) and isinstance(m.get("content"), str)]
        )
        # transformers tokenizes rendered templates without adding special tokens: the template has them.
        text = self.render_text(messages, tools=tools, template_kwargs=template_kwargs)
        return self.tokenize(text, add_special_tokens=False)

    def render_text(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """Chat messages through the template (with the system prompt when they have none).

        ``template_kwargs``: more template variables (e.g. ``enable_thinking``).

        Assistant ``tool_calls`` and ``role: "tool"`` results, and an assistant's reasoning, are
        normalised the way the templates expect them (see :func:`inference4py.tasks.tools.messages_for_template`).
        """
        if not self.template:
            raise ConfigurationError(
                f"Chat messages need a chat template, and {self.folder} has none.", fix="chat_template"
            )
        if self.system_prompt is not None and not any(m.get("role") == "system" for m in messages):
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        rendered: Sequence[Message] = messages
        if tools is not None or any(m.get("role") in ("assistant", "tool") for m in messages):
            from inference4py.tasks.tools import messages_for_template

            rendered = messages_for_template(messages)
        template = self.tool_template if tools is not None else self.template
        return self.tokenizer.apply_chat_template(
            rendered, add_generation_prompt=True, template=template, tools=tools, **(template_kwargs or {})
        )


def _refuse_images(messages: Sequence[Message]) -> None:
    """Text-only models take no image content parts: say where images go instead of rendering them as text."""
    for m in messages:
        content = m.get("content")
        if isinstance(content, (list, tuple)) and any(
            isinstance(p, Mapping) and p.get("type") in ("image", "image_url") for p in content
        ):
            raise InvalidInputError(
                "The messages hold an image content part, but this is a text-only model: it takes no images. "
                "Use VisionLanguageModel with a vision-language model folder, or drop the image parts."
            )


_THINK = ("<think>", "</think>")
