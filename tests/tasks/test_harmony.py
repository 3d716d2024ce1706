"""gpt-oss's Harmony turns told apart as reasoning, answer and tool calls, token by token and all at once.

The completions are tokenized with the gpt-oss fixture's tokenizer carrying Harmony's special tokens
(tests/harmony.py) and turned back into text by the generation path (``stream_generate``), which keeps
Harmony's markers in the text: one chunk per token, as the server's streams feed the splitter.
"""

from __future__ import annotations

import json
import random

import pytest

from inference4py.generation.config import GenerationConfig
from inference4py.generation.generate import stream_generate
from inference4py.generation.result import GenerationResult
from inference4py.generation.streaming import IncrementalDetokenizer
from inference4py.tasks.harmony import HarmonySplitter, HarmonyTurn, harmony_opening, split_harmony
from inference4py.tasks.output_control import OutputControl, output_control
from inference4py.tasks.tools import detect_tool_family, parse_tool_calls, tool_call_constraint
from inference4py.tasks.turn import CallArguments, CallEnd, CallStart, ReasoningDelta, TextDelta, TurnSplitter
from inference4py.tokenization.harmony import HARMONY_MARKERS, harmony_markers
from tests.harmony import HARMONY_TEMPLATE, harmony_metadata, harmony_tokenizer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}

# (completion after the prompt's <|start|>assistant, answer, reasoning, calls); None: no such text
COMPLETIONS = {
    "call": (
        "<|channel|>analysis<|message|>User asks weather. Need to call tool.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
        "<|call|>",
        None,
        "User asks weather. Need to call tool.",
        [("get_weather", {"city": "Paris"})],
    ),
    "answer": (
        "<|channel|>analysis<|message|>Simple greeting.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>",
        "Hello! How can I help?",
        "Simple greeting.",
        [],
    ),
    "recipient in the header's role part": (
        "<|channel|>analysis<|message|>Weather: call.<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}<|call|>',
        None,
        "Weather: call.",
        [("get_weather", {"city": "Rome"})],
    ),
    "recipient first thing": (
        " to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>",
        None,
        None,
        [("get_time", {})],
    ),
    "preamble, then a call": (
        "<|channel|>analysis<|message|>Tell the user, then call.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Let me check the weather.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}'
        "<|call|>",
        "Let me check the weather.",
        "Tell the user, then call.",
        [("get_weather", {"city": "Oslo"})],
    ),
    "answer only": (
        "<|channel|>final<|message|>Il fait 21 °C à Paris ☀️\nBonne journée.<|return|>",
        "Il fait 21 °C à Paris ☀️\nBonne journée.",
        None,
        [],
    ),
    "two analyses": (
        "<|channel|>analysis<|message|>First.<|end|><|start|>assistant<|channel|>analysis<|message|>Second.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.<|return|>",
        "Done.",
        "First.\nSecond.",
        [],
    ),
}

MALFORMED = {
    # cut inside the reasoning (the budget ran out): the reasoning so far, no answer
    "channel never closed": ("<|channel|>analysis<|message|>Thinking about the", "", "Thinking about the"),
    # cut inside the next header: its words are structure, not answer
    "header cut": ("<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>fin", "", "Hm."),
    # a channel Harmony does not name: its content is answer text, as an unrecognised call is for the others
    "unknown channel": ("<|channel|>notes<|message|>Some text<|end|>", "Some text", None),
    # no header at all (a model not writing Harmony): answer text
    "no header": ("Hello there, world.", "Hello there, world.", None),
    # markers where content belongs are dropped
    "stray markers": ("<|channel|>final<|message|>Hi<|message|> there<|constrain|>!<|return|>", "Hi there!", None),
    # a message begun without <|end|> and <|start|>
    "channel without start": ("<|channel|>analysis<|message|>A<|channel|>final<|message|>B", "B", "A"),
}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return harmony_tokenizer(tmp_path_factory.mktemp("harmony") / "tokenizer")


def _ends(tok) -> list[int]:
    return [tok.token_to_id("<|return|>"), tok.token_to_id("<|call|>")]


def _chunks(tok, completion: str) -> list[str]:
    """The completion's tokens as the generation path turns them into text, one chunk per token."""
    ids = tok.encode(completion, add_special_tokens=False)
    config = GenerationConfig(eos_token_id=_ends(tok), max_new_tokens=len(ids) + 1)
    return [chunk.text for chunk in stream_generate(iter(ids), tok, config)]


def _events(pieces: list[str], *, calls: bool = True, turn: HarmonyTurn | None = None) -> tuple[list, TurnSplitter]:
    splitter = TurnSplitter("harmony" if calls else None, harmony=turn or HarmonyTurn(), rng=random.Random(0))
    events = []
    for piece in pieces:
        events += splitter.feed(piece)
    return events + splitter.close(), splitter


def _joined(events: list, kind: type) -> str | None:
    texts = [e.text for e in events if isinstance(e, kind)]
    return "".join(texts) if texts else None


def test_the_vocabulary_says_harmony(tok, tmp_path):
    assert harmony_markers(tok.token_to_id) == {m: tok.token_to_id(m) for m in HARMONY_MARKERS}
    assert all(i >= 1000 for i in harmony_markers(tok.token_to_id).values())
    from inference4py.gguf.reader import GGUFFile
    from inference4py.gguf.tokenizer import tokenizer_files
    from inference4py.tokenization import load_tokenizer
    from tests.conftest import FIXTURES

    plain = tmp_path / "plain"  # the fixture as it is: ChatML's specials, no Harmony
    plain.mkdir()
    for name, content in tokenizer_files(GGUFFile(FIXTURES / "gguf" / "gptoss-F32.gguf").metadata).items():
        (plain / name).write_text(json.dumps(content))
    assert harmony_markers(load_tokenizer(plain).token_to_id) == {}
    assert harmony_markers(None) == {}


def test_generated_text_keeps_the_markers_and_drops_the_stop_token(tok):
    completion = COMPLETIONS["call"][0]
    ids = tok.encode(completion, add_special_tokens=False)
    assert {tok.token_to_id(m) for m in ("<|channel|>", "<|message|>", "<|end|>", "<|start|>")} <= set(ids)
    assert "<|channel|>" not in tok.decode(ids)  # decoding with skip_special_tokens drops them...
    chunks = _chunks(tok, completion)
    assert len(chunks) == len(ids)  # one chunk per token
    assert "".join(chunks) == completion.removesuffix("<|call|>")  # ...generation keeps them, not the stop token
    assert "<|channel|>" in chunks  # each marker arrives whole, as its own token's text
    plain = IncrementalDetokenizer(tok)  # a detokenizer not told to keep them drops them, as decode does
    assert plain.add_many(ids) + plain.finish() == tok.decode(ids)


def test_harmony_stop_tokens_are_return_and_call_not_end():
    from inference4py.gguf.tokenizer import generation_defaults

    metadata = harmony_metadata()
    eos = generation_defaults(metadata)["eos_token_id"]
    tokens = metadata["tokenizer.ggml.tokens"]
    assert {tokens[i] for i in eos} == {"<|return|>", "<|call|>", "<|endoftext|>"}  # <|end|> ends a message only


@pytest.mark.parametrize("name", list(COMPLETIONS))
@pytest.mark.parametrize("whole", [False, True], ids=["token by token", "all at once"])
def test_a_turn_is_split_exactly(tok, name, whole):
    completion, answer, reasoning, calls = COMPLETIONS[name]
    chunks = _chunks(tok, completion)
    events, splitter = _events(["".join(chunks)] if whole else chunks)
    assert _joined(events, TextDelta) == answer
    assert _joined(events, ReasoningDelta) == reasoning
    ends = [e.call for e in events if isinstance(e, CallEnd)]
    assert [(c.name, c.arguments) for c in ends] == calls
    assert splitter.calls == ends and not splitter.open_call
    starts = [e for e in events if isinstance(e, CallStart)]
    assert [(s.index, s.id, s.name) for s in starts] == [(i, c.id, c.name) for i, c in enumerate(ends)]
    for i, call in enumerate(ends):  # the argument pieces come after the start and join to the arguments
        pieces = [k for k, e in enumerate(events) if isinstance(e, CallArguments) and e.index == i]
        assert pieces and min(pieces) > events.index(starts[i])
        assert json.loads("".join(events[k].text for k in pieces)) == call.arguments
    for event in events:  # the markers never reach the answer or the reasoning
        if isinstance(event, (TextDelta, ReasoningDelta)):
            assert "<|" not in event.text


def test_the_answer_streams_as_its_tokens_arrive(tok):
    chunks = _chunks(tok, COMPLETIONS["answer"][0])
    splitter = TurnSplitter(None, harmony=HarmonyTurn())
    seen = []
    for piece in chunks:
        seen.append(splitter.feed(piece))
    # every token of the content came out with its own chunk (nothing held back but the markers)
    content = [e for events in seen for e in events]
    assert "".join(e.text for e in content if isinstance(e, TextDelta)) == "Hello! How can I help?"
    assert sum(1 for events in seen if any(isinstance(e, TextDelta) for e in events)) > 3
    assert splitter.close() == []


def test_call_arguments_stream_before_the_call_ends(tok):
    chunks = _chunks(tok, COMPLETIONS["call"][0])
    splitter = TurnSplitter("harmony", harmony=HarmonyTurn())
    events = []
    for piece in chunks:
        events += splitter.feed(piece)
    assert [type(e) for e in events if not isinstance(e, ReasoningDelta)][:2] == [CallStart, CallArguments]
    assert splitter.open_call and not splitter.calls  # <|call|> ends it: the output's end
    assert [type(e) for e in splitter.close()] == [CallEnd]
    assert not splitter.open_call and splitter.calls[0].arguments == {"city": "Paris"}


@pytest.mark.parametrize("name", list(MALFORMED))
@pytest.mark.parametrize("whole", [False, True], ids=["token by token", "all at once"])
def test_malformed_turns_give_a_plain_result(tok, name, whole):
    completion, answer, reasoning = MALFORMED[name]
    chunks = _chunks(tok, completion)
    events, splitter = _events(["".join(chunks)] if whole else chunks)
    assert (_joined(events, TextDelta) or "", _joined(events, ReasoningDelta)) == (answer, reasoning)
    assert not splitter.calls and not splitter.open_call


@pytest.mark.parametrize("whole", [False, True], ids=["token by token", "all at once"])
def test_call_arguments_cut_by_the_budget_stay_an_open_call(tok, whole):
    completion = COMPLETIONS["call"][0]
    ids = tok.encode(completion, add_special_tokens=False)
    config = GenerationConfig(eos_token_id=_ends(tok), max_new_tokens=len(ids) - 4)
    chunks = [c.text for c in stream_generate(iter(ids[: len(ids) - 4]), tok, config)]
    events, splitter = _events(["".join(chunks)] if whole else chunks)
    assert [e.name for e in events if isinstance(e, CallStart)] == ["get_weather"]
    written = "".join(chunks).rpartition("<|message|>")[2]
    assert written.startswith('{"city":"P') and _joined(events, CallArguments) == written
    assert not [e for e in events if isinstance(e, CallEnd)]
    assert splitter.open_call and not splitter.calls
    assert _joined(events, TextDelta) is None  # the cut arguments are not answer text


def test_arguments_that_are_no_object_are_no_call(tok):
    text = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>[1, 2]<|call|>"
    events, splitter = _events(_chunks(tok, text))
    assert not splitter.calls and splitter.open_call and _joined(events, TextDelta) is None


def test_a_call_the_request_does_not_allow_is_reasoning(tok):
    events, splitter = _events(_chunks(tok, COMPLETIONS["call"][0]), calls=False)
    assert not [e for e in events if isinstance(e, (CallStart, CallArguments, CallEnd))] and not splitter.calls
    assert _joined(events, ReasoningDelta) == 'User asks weather. Need to call tool.\n{"city":"Paris"}'
    assert _joined(events, TextDelta) is None


def test_a_prompt_that_opened_the_answer(tok):
    """A template whose generation prompt opens the final channel: the output starts inside it."""
    turn = HarmonyTurn(harmony_opening("<|end|><|start|>assistant<|channel|>final<|message|>"))
    assert turn.opening == "assistant<|channel|>final<|message|>"
    events, _ = _events(_chunks(tok, "Paris is sunny.<|return|>"), turn=turn)
    assert _joined(events, TextDelta) == "Paris is sunny." and _joined(events, ReasoningDelta) is None
    assert harmony_opening("<|end|><|start|>assistant") == "assistant" and harmony_opening("no start") is None


def test_inline_keeps_the_reasoning_in_the_text_as_written(tok):
    events, splitter = _events(_chunks(tok, COMPLETIONS["call"][0]), turn=HarmonyTurn(inline=True))
    assert _joined(events, TextDelta) == "<|channel|>analysis<|message|>User asks weather. Need to call tool.<|end|>"
    assert _joined(events, ReasoningDelta) is None and [c.name for c in splitter.calls] == ["get_weather"]


def test_the_final_parse_is_the_stream_s(tok):
    for completion, answer, reasoning, calls in COMPLETIONS.values():
        text = "".join(_chunks(tok, completion))
        split = split_harmony(text, rng=random.Random(0))
        assert (split.text, split.reasoning) == (answer or "", reasoning)
        assert [(c.name, c.arguments) for c in split.calls] == calls
        content, parsed = parse_tool_calls(text, "harmony", rng=random.Random(0))
        assert content == (answer or "") and parsed == split.calls
    assert detect_tool_family(HARMONY_TEMPLATE) == "harmony"
    direct = HarmonySplitter(calls=True)  # the class TurnSplitter delegates to
    assert direct.feed("<|channel|>final<|message|>ok") + direct.close() == [TextDelta("ok")]


def _result(text: str, reason: str = "eos") -> GenerationResult:
    return GenerationResult(text, (), 1, 1, reason, 0.0, 0.0)  # type: ignore[arg-type]


def test_output_control_splits_a_whole_turn_with_the_same_code(tok):
    control = output_control({"tools": [WEATHER]}, template=HARMONY_TEMPLATE, token_to_id=tok.token_to_id)
    assert control.tool_request is not None and control.tool_request.family == "harmony"
    assert control.compiled is None  # "auto": the channels mark a call, nothing to constrain
    control = control.with_harmony(HarmonyTurn())
    done = control.finish(_result("".join(_chunks(tok, COMPLETIONS["call"][0]))))
    assert (done.text, done.reasoning, done.finish_reason) == (
        "",
        "User asks weather. Need to call tool.",
        "tool_calls",
    )
    assert [(c.name, c.arguments) for c in done.tool_calls] == [("get_weather", {"city": "Paris"})]
    cut = control.finish(_result('<|channel|>commentary to=functions.get_weather<|message|>{"ci', "length"))
    assert (cut.text, cut.tool_calls, cut.finish_reason) == ("", (), "length")
    answer = OutputControl(harmony=HarmonyTurn()).finish(_result("".join(_chunks(tok, COMPLETIONS["answer"][0]))))
    assert (answer.text, answer.reasoning, answer.finish_reason) == (
        "Hello! How can I help?",
        "Simple greeting.",
        "eos",
    )


def test_a_harmony_vocabulary_gets_harmony_calls_whatever_its_template(tok):
    """The vocabulary decides (one place): a template with Hermes' marker still gets Harmony's calls."""
    template = "{% for m in messages %}{{ m.content }}{% endfor %}{# tools: {{ tools }} <tool_call> #}{{ tools }}"
    control = output_control({"tools": [WEATHER]}, template=template, token_to_id=tok.token_to_id)
    assert control.tool_request is not None and control.tool_request.family == "harmony"


def test_required_and_named_calls_are_constrained_to_harmony(tok):
    pytest.importorskip("llguidance")
    from inference4py.generation.constraints import Constraint

    def complete(grammar: str, text: str) -> bool:
        constraint = Constraint(tok, grammar=grammar, eos_token_ids=_ends(tok))
        return constraint.is_complete(tok.encode(text, add_special_tokens=False))

    call = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    reasoned = "<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant" + call
    required = tool_call_constraint([WEATHER, TIME], "required", "harmony", token_to_id=tok.token_to_id)
    assert required is not None
    assert complete(required, call) and complete(required, reasoned)
    assert not complete(required, "<|channel|>final<|message|>Hi<|return|>")
    assert not complete(required, call.replace('"city"', '"town"'))  # the arguments follow the schema
    named = tool_call_constraint(
        [WEATHER, TIME], {"function": {"name": "get_time"}}, "harmony", token_to_id=tok.token_to_id
    )
    assert named is not None and not complete(named, call)
    assert complete(named, "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>")
    assert tool_call_constraint([WEATHER], "auto", "harmony", token_to_id=tok.token_to_id) is None


def test_the_template_renders_a_conversation_with_a_call_and_its_result(tok):
    """gpt-oss's template needs: strftime_now, model_identity / reasoning_effort / builtin_tools
    variables, an earlier calling turn's reasoning as ``thinking``, the call's arguments as an object,
    and a tool result after its call."""
    from inference4py.tasks.tools import messages_for_template

    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Need the weather tool.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
        {"role": "assistant", "content": "It is 21 degrees."},
        {"role": "user", "content": "And in Rome?"},
    ]
    text = tok.apply_chat_template(
        messages_for_template(messages),
        tools=[WEATHER],
        reasoning_effort="high",
        builtin_tools=["browser"],
        model_identity="You are a weather bot.",
    )
    assert text.startswith("<|start|>system<|message|>You are a weather bot.") and "Reasoning: high" in text
    assert "## browser" in text and "type get_weather = (_: {city: string}) => any;" in text
    assert "<|start|>developer<|message|># Instructions\n\nAnswer briefly." in text
    assert "<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>" in text
    assert (
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
        in text
    )
    assert (
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"temperature": 21}<|end|>' in text
    )
    assert text.endswith("<|start|>user<|message|>And in Rome?<|end|><|start|>assistant")
    # a calling turn with a preamble and reasoning: the template takes one of them, and gets the preamble
    messages[2]["content"] = "Let me look."
    both = tok.apply_chat_template(messages_for_template(messages), tools=[WEATHER])
    assert "<|channel|>commentary<|message|>Let me look.<|end|>" in both and "Need the weather tool." not in both


# ------------------------------------------------------------------ a gpt-oss model writing Harmony
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    """The tiny random gpt-oss model (Harmony's vocabulary layout) with the Harmony template: ``model(script)``
    makes it write ``script`` (a random model writes no Harmony by itself)."""
    pytest.importorskip("gguf")
    pytest.importorskip("onnx")
    from tests.harmony import scripted_gpt_oss

    return scripted_gpt_oss(tmp_path_factory.mktemp("gpt-oss"))


def test_generate_tells_reasoning_answer_and_calls_apart(gpt_oss):
    model = gpt_oss(COMPLETIONS["call"][0])
    r = model.generate(ASK, max_new_tokens=80, tools=[WEATHER])
    assert (r.text, r.reasoning, r.finish_reason) == ("", "User asks weather. Need to call tool.", "tool_calls")
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert r.token_ids[-1] == model.tokenizer.token_to_id("<|call|>")  # <|call|> stopped it
    cut = model.generate(ASK, max_new_tokens=len(r.token_ids) - 3, tools=[WEATHER])
    assert (cut.text, cut.tool_calls, cut.finish_reason) == ("", (), "length")
    assert cut.reasoning == r.reasoning
    inline = model.generate(ASK, max_new_tokens=80, tools=[WEATHER], reasoning="inline")
    assert inline.reasoning is None and inline.text.startswith("<|channel|>analysis<|message|>User asks")
    assert inline.tool_calls[0].arguments == {"city": "Paris"} and inline.token_ids == r.token_ids
    no_tools = model.generate(ASK, max_new_tokens=80)  # a call the request does not allow: reasoning
    assert no_tools.text == "" and no_tools.tool_calls == () and no_tools.reasoning.endswith('{"city":"Paris"}')


def test_a_turn_goes_on_after_end_and_stops_at_return(gpt_oss):
    model = gpt_oss(COMPLETIONS["answer"][0])
    r = model.generate(ASK, max_new_tokens=80)
    assert (r.text, r.reasoning, r.finish_reason) == ("Hello! How can I help?", "Simple greeting.", "eos")
    ids = list(r.token_ids)
    end, ret = model.tokenizer.token_to_id("<|end|>"), model.tokenizer.token_to_id("<|return|>")
    assert end in ids[:-1] and ids[-1] == ret  # <|end|> ended the analysis message, not the turn


def test_the_stream_splits_as_the_result(gpt_oss):
    from inference4py.tasks.options import RequestOptions

    model = gpt_oss(COMPLETIONS["preamble, then a call"][0])
    options = RequestOptions(tools=[WEATHER], max_new_tokens=80)
    splitter = model.prepare(ASK, options).control.splitter(rng=random.Random(0))
    events = []
    for chunk in model.stream_chunks(ASK, options=options):
        events += splitter.feed(chunk.text)
    events += splitter.close()
    r = model.generate(ASK, options=options)
    assert _joined(events, TextDelta) == r.text == "Let me check the weather."
    assert _joined(events, ReasoningDelta) == r.reasoning == "Tell the user, then call."
    assert [e.call.arguments for e in events if isinstance(e, CallEnd)] == [c.arguments for c in r.tool_calls]


def test_prepare_reads_how_the_prompt_opened_the_turn(gpt_oss):
    from inference4py.tasks.options import RequestOptions

    model = gpt_oss(COMPLETIONS["answer"][0])
    assert model.prepare(ASK, RequestOptions()).control.harmony == HarmonyTurn("assistant")
    assert model.prepare(ASK, RequestOptions(reasoning="inline")).control.harmony == HarmonyTurn(
        "assistant", inline=True
    )
    # a str goes through the template too (the builder's chat_template renders strings)
    assert model.prepare("Weather in Paris?", RequestOptions()).control.harmony == HarmonyTurn("assistant")
    ids = model.tokenizer.encode("<|start|>user<|message|>Hi<|end|><|start|>assistant", add_special_tokens=False)
    assert model.prepare(ids, RequestOptions()).control.harmony is None  # token ids are the caller's own
