"""Parsing and validating a description's sections by hand: sessions, flow, state, tokens, generation.

Every check raises :class:`PipelineSpecError` (or ``ModelFilesMissingError`` for a
missing session file) with a message that names the fix.  ``where`` says which
description is being read (``inference4py.json``, ``genai_config.json``, the
detected pipeline).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference4py.engine.pipeline.spec import (
    _TOKEN_KEYS,
    GENERATION_KEYS,
    GENERATION_OUTPUTS,
    GENERATION_SOURCE,
    GRAPH_OPTIMIZATION_LEVELS,
    KV_FORMATS,
    LOOP_MODES,
    MAX_FLOW_STEPS,
    PHASES,
    POSITION_STRATEGIES,
    SESSION_OPTION_KEYS,
    STEP_MODES,
    CrossCacheSpec,
    FlowStep,
    KVCacheSpec,
    PipelineSpec,
    PositionIdsSpec,
    SessionSpec,
    StateSpec,
    TokenSpec,
    Wire,
    _valid_generation_value,
    feeding_sessions,
)
from inference4py.errors import ModelFilesMissingError, PipelineSpecError

if TYPE_CHECKING:  # kv_cache imports onnxruntime; it is imported where a cache layout is parsed
    from inference4py.engine.kv_cache import CacheNames


def _mapping_or_error(value: Any, where: str, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PipelineSpecError(f'{where}: "{key}" must be an object.')
    _check_keys(value, set(_TOKEN_KEYS) if key == "tokens" else set(GENERATION_KEYS), where, f'"{key}"')
    return value


def _check_keys(obj: Mapping[str, Any], allowed: set[str], where: str, what: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise PipelineSpecError(
            f"{where}: unknown key(s) {', '.join(repr(k) for k in unknown)} in {what}. Allowed: "
            f"{', '.join(sorted(allowed))}."
        )


def _safe_file(root: Path, file: Any, name: str, where: str) -> str:
    if not isinstance(file, str) or not file.strip():
        raise PipelineSpecError(
            f'{where}: session "{name}" needs a "file": the ONNX file, relative to the model folder.'
        )
    posix = file.replace("\\", "/")
    if posix.startswith("/") or Path(file).is_absolute() or (len(posix) > 1 and posix[1] == ":"):
        raise PipelineSpecError(
            f'{where}: session "{name}" has the absolute path "{file}". Session files must be relative to the model '
            "folder: copy the file into the folder and give its relative path."
        )
    if ".." in posix.split("/"):
        raise PipelineSpecError(
            f'{where}: session "{name}" file "{file}" leaves the model folder (".."). Session files must stay inside '
            "the model folder: copy the file into it and give its relative path."
        )
    path = root / posix
    try:
        target = path.resolve()
        inside = any(target.is_relative_to(allowed) for allowed in _allowed_roots(root))
    except OSError:
        inside = False
    if not inside:
        raise PipelineSpecError(
            f'{where}: session "{name}" file "{file}" is a link that points outside the model folder '
            f"({path.resolve()}). Session files must stay inside the model folder: copy the file in instead of linking it."
        )
    if not path.is_file():
        onnx = sorted(str(p.relative_to(root)) for p in root.rglob("*.onnx"))[:10]
        raise ModelFilesMissingError(
            f'{where}: session "{name}" needs {file}, which is not in {root}. ONNX files present: '
            f"{', '.join(onnx) or 'none'}. Fix the file name in the description or download the missing file.",
            [posix],
        )
    return posix


def _allowed_roots(root: Path) -> list[Path]:
    """Where a session file may live: the folder, and for a Hugging Face cache snapshot
    (``models--org--name/snapshots/<rev>``, whose files are links) the repo's ``blobs``."""
    allowed = [root.resolve()]
    if root.parent.name == "snapshots" and (root.parent.parent / "blobs").is_dir():
        allowed.append((root.parent.parent / "blobs").resolve())
    return allowed


def _parse_sessions(value: Any, root: Path, where: str) -> dict[str, SessionSpec]:
    if not isinstance(value, Mapping) or not value:
        raise PipelineSpecError(
            f'{where}: the pipeline needs at least one session. Add "sessions": {{"decoder": {{"file": "model.onnx"}}}} '
            'to "pipeline", or "extends": "autoregressive-decoder".'
        )
    sessions: dict[str, SessionSpec] = {}
    for name, body in value.items():
        if not isinstance(body, Mapping):
            raise PipelineSpecError(f'{where}: session "{name}" must be an object like {{"file": "model.onnx"}}.')
        if "." in str(name) or name == GENERATION_SOURCE:
            raise PipelineSpecError(
                f'{where}: session name "{name}" is not allowed: dataflow wires address tensors as "session.tensor", '
                f'so a session name has no "." and is not "{GENERATION_SOURCE}" (the finished generation\'s source). '
                "Rename the session."
            )
        _check_keys(
            body, {"file", "execution_provider", "provider_options", "session_options"}, where, f'session "{name}"'
        )
        file = _safe_file(root, body.get("file"), name, where)
        provider = body.get("execution_provider")
        if provider is not None and (not isinstance(provider, str) or not provider):
            raise PipelineSpecError(
                f'{where}: session "{name}" execution_provider must be a provider name such as "CUDAExecutionProvider".'
            )
        provider_options = body.get("provider_options") or {}
        if not isinstance(provider_options, Mapping):
            raise PipelineSpecError(f'{where}: session "{name}" provider_options must be an object of strings.')
        options = body.get("session_options") or {}
        if not isinstance(options, Mapping):
            raise PipelineSpecError(f'{where}: session "{name}" session_options must be an object.')
        for key, opt in options.items():
            if key not in SESSION_OPTION_KEYS:
                raise PipelineSpecError(
                    f'{where}: unknown session option "{key}" in session "{name}". Known: {", ".join(SESSION_OPTION_KEYS)}.'
                )
            types = SESSION_OPTION_KEYS[key]
            if not isinstance(opt, types) or (bool not in types and isinstance(opt, bool)):
                raise PipelineSpecError(f'{where}: session option "{key}" of "{name}" has the wrong type ({opt!r}).')
            if key == "graph_optimization_level" and opt not in GRAPH_OPTIMIZATION_LEVELS:
                raise PipelineSpecError(
                    f'{where}: graph_optimization_level "{opt}" is unknown. Valid: {", ".join(GRAPH_OPTIMIZATION_LEVELS)}.'
                )
            if key.endswith("_threads") and isinstance(opt, int) and opt < 0:
                raise PipelineSpecError(f"{where}: {key} must be >= 0 (0 lets onnxruntime choose).")
        sessions[str(name)] = SessionSpec(file, provider, dict(provider_options), dict(options))
    return sessions


def _parse_flow(
    value: Any, sessions: Mapping[str, SessionSpec], where: str, *, version: int = 2
) -> tuple[FlowStep, ...]:
    """The flow's entries, each checked on its own; :func:`_check_flow` checks them together with the dataflow."""
    if not isinstance(value, list) or not value:
        raise PipelineSpecError(
            f'{where}: the pipeline needs a "flow", e.g. [{{"run": "{next(iter(sessions))}", "when": "step"}}] '
            '(or "extends": "autoregressive-decoder").'
        )
    if len(value) > MAX_FLOW_STEPS:
        raise PipelineSpecError(f"{where}: the flow has {len(value)} steps; at most {MAX_FLOW_STEPS} are allowed.")
    steps = []
    for item in value:
        if not isinstance(item, Mapping):
            raise PipelineSpecError(
                f'{where}: flow entries look like {{"run": "decoder", "when": "step"}}, got {item!r}.'
            )
        _check_keys(item, {"run", "when", "steps", "loop"}, where, "a flow entry")
        run, when, mode, loop = item.get("run"), item.get("when"), item.get("steps", "all"), item.get("loop")
        if run not in sessions:
            raise PipelineSpecError(
                f'{where}: flow step references session "{run}" but no such session is declared in pipeline.sessions '
                f"(declared: {', '.join(sessions)}). Declare it, or fix the name in the flow."
            )
        if when not in PHASES:
            raise PipelineSpecError(f'{where}: flow step "{run}" has when={when!r}. Valid phases: {", ".join(PHASES)}.')
        if mode not in STEP_MODES or (mode != "all" and when != "step"):
            raise PipelineSpecError(
                f'{where}: flow step "{run}" has steps={mode!r}; "steps" applies to "step" sessions and is one of '
                f"{', '.join(STEP_MODES)}."
            )
        if loop is not None:
            if version < 2:
                raise PipelineSpecError(
                    f'{where}: flow step "{run}" has "loop", which is part of version 2 of the format. '
                    'Set "version": 2 at the top level.'
                )
            if loop not in LOOP_MODES or when != "init":
                raise PipelineSpecError(
                    f'{where}: flow step "{run}" has loop={loop!r}; "loop" applies to "init" sessions and is one of '
                    f"{', '.join(LOOP_MODES)}."
                )
        if when == "final" and version < 2:
            raise PipelineSpecError(
                f'{where}: flow step "{run}" runs at "final", which is part of version 2 of the format. '
                'Set "version": 2 at the top level, and wire its inputs in "dataflow" '
                '(e.g. {"from": "generation.ids", "to": "' + str(run) + '.input_ids"}).'
            )
        steps.append(FlowStep(str(run), when, mode, loop or "batched"))
    seen = set()
    for step in steps:
        if step.run in seen:
            raise PipelineSpecError(
                f'{where}: session "{step.run}" appears twice in the flow; each session runs in one place.'
            )
        seen.add(step.run)
    unused = [name for name in sessions if name not in seen]
    if unused:
        raise PipelineSpecError(
            f"{where}: session(s) {', '.join(unused)} are declared but never run. Add them to the flow "
            f'(e.g. {{"run": "{unused[0]}", "when": "step"}}) or remove them.'
        )
    return tuple(steps)


def _check_flow(steps: tuple[FlowStep, ...], dataflow: tuple[Wire, ...], where: str) -> None:
    """What the runtimes run: one ``step`` decoder for the prompt and one for the later tokens
    (the step sessions feeding them through the dataflow aside), at most one encoder; or, single
    pass, one ``init`` session and nothing else."""
    if len(steps) == 1 and steps[0].when == "init" and not dataflow:
        return  # single-pass: one session run once on the input (a sentence encoder)
    feeders = set(feeding_sessions(steps, dataflow))
    sources = {w.source for w in dataflow}
    decoders = [s for s in steps if s.when == "step" and s.run not in feeders]
    first = [s for s in decoders if s.steps in ("all", "first")]
    later = [s for s in decoders if s.steps in ("all", "later")]
    encoders = [s for s in steps if s.when == "init" and s.run not in sources]
    if len(encoders) > 1:
        raise PipelineSpecError(
            f"{where}: {len(encoders)} init sessions ({', '.join(s.run for s in encoders)}) feed nothing through "
            "the dataflow; the runtimes take one such session (the encoder). Wire the others' outputs in "
            '"dataflow" (e.g. {"from": "vision.image_features", "to": "embedding.image_features"}).'
        )
    if len(first) != 1 or len(later) != 1:
        raise PipelineSpecError(
            f'{where}: the flow needs exactly one "step" session for the prompt and one for the following tokens: '
            'either one with "steps": "all" (the default), or one with "steps": "first" and one with "steps": "later". '
            "Step sessions that feed another one through the dataflow (an embedding session) are not counted"
            + (
                f" (here {', '.join(s.run for s in first)} all read the prompt: wire the one that feeds the decoder, "
                'e.g. {"from": "embedding.inputs_embeds", "to": "decoder.inputs_embeds"}).'
                if len(first) > 1
                else "."
            )
        )
    odd = [s.run for s in steps if s.when == "step" and s.run in feeders and s.steps != "all"]
    if odd:
        raise PipelineSpecError(
            f'{where}: step session "{odd[0]}" feeds the decoder through the dataflow and runs on every step: '
            'remove its "steps".'
        )


_PHASE_ORDER = {"init": 0, "step": 1, "final": 2}


def _split_end(value: Any, key: str, where: str) -> tuple[str, str]:
    if not isinstance(value, str) or "." not in value.strip(".") or value.startswith(".") or value.endswith("."):
        raise PipelineSpecError(
            f'{where}: dataflow "{key}" must be "session.tensor" (e.g. "vision.image_features"), got {value!r}.'
        )
    session, tensor = value.split(".", 1)
    return session, tensor


def _parse_dataflow(
    value: Any, sessions: Mapping[str, SessionSpec], steps: tuple[FlowStep, ...], where: str, *, version: int = 2
) -> tuple[Wire, ...]:
    """The dataflow wires, checked against the declared sessions and the flow (the graphs come later)."""
    if value is None:
        return ()
    if version < 2:
        raise PipelineSpecError(
            f'{where}: "dataflow" is part of version 2 of the format. Set "version": 2 at the top level.'
        )
    if not isinstance(value, list):
        raise PipelineSpecError(
            f'{where}: "dataflow" must be a list like [{{"from": "embedding.inputs_embeds", '
            '"to": "decoder.inputs_embeds"}].'
        )
    phase = {s.run: s.when for s in steps}
    order = {s.run: i for i, s in enumerate(steps)}
    wires: list[Wire] = []
    fed: dict[tuple[str, str], str] = {}
    for item in value:
        if not isinstance(item, Mapping):
            raise PipelineSpecError(
                f'{where}: dataflow entries look like {{"from": "vision.image_features", '
                f'"to": "embedding.image_features"}}, got {item!r}.'
            )
        _check_keys(item, {"from", "to"}, where, "a dataflow wire")
        source, output = _split_end(item.get("from"), "from", where)
        target, input_name = _split_end(item.get("to"), "to", where)
        for name, end in ((source, "from"), (target, "to")):
            if name == GENERATION_SOURCE and end == "from":
                continue
            if name not in sessions:
                raise PipelineSpecError(
                    f'{where}: Dataflow wire references session "{name}" ({end}: "{item.get(end)}") but no such '
                    f"session is declared in pipeline.sessions (declared: {', '.join(sessions)}). Declare it, or fix "
                    "the name in the wire."
                )
        if source == GENERATION_SOURCE:
            if output not in GENERATION_OUTPUTS:
                raise PipelineSpecError(
                    f'{where}: dataflow wire references output "{output}" but session "{GENERATION_SOURCE}" has no '
                    f"such output (available outputs: {', '.join(GENERATION_OUTPUTS)})."
                )
            if phase[target] != "final":
                raise PipelineSpecError(
                    f'{where}: dataflow wire "{source}.{output}" → "{target}.{input_name}": the finished generation '
                    f'exists only after the loop, so it feeds "final" sessions; "{target}" runs at "{phase[target]}".'
                )
        key = (target, input_name)
        if key in fed:
            raise PipelineSpecError(
                f'{where}: input "{input_name}" of session "{target}" is fed by two dataflow wires '
                f'("{fed[key]}" and "{source}.{output}"); keep one.'
            )
        fed[key] = f"{source}.{output}"
        wires.append(Wire(source, output, target, input_name))
    _check_cycles(wires, where)
    for w in wires:
        if w.source == GENERATION_SOURCE:
            continue
        src, dst = phase[w.source], phase[w.target]
        if _PHASE_ORDER[src] > _PHASE_ORDER[dst] or (src == dst and order[w.source] > order[w.target]):
            raise PipelineSpecError(
                f'{where}: dataflow wire "{w.origin}" → "{w.target}.{w.input}": session "{w.source}" ({src}) runs '
                f'after "{w.target}" ({dst}), so its output does not exist yet when "{w.target}" runs. Move '
                f'"{w.source}" before "{w.target}" in the flow.'
            )
        if src == "step" and dst == "final":
            raise PipelineSpecError(
                f'{where}: dataflow wire "{w.origin}" → "{w.target}.{w.input}": collecting a step session\'s outputs '
                'over the run is not supported; feed final sessions from "generation.ids", "generation.sequence" '
                "or an init session's outputs."
            )
    return tuple(wires)


def _check_cycles(wires: list[Wire], where: str) -> None:
    """Refuse a wire loop, naming it: ``a → b → c → a``."""
    edges: dict[str, list[str]] = {}
    for w in wires:
        edges.setdefault(w.source, [])
        if w.target not in edges[w.source]:
            edges[w.source].append(w.target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                loop = path[path.index(nxt) :] + [nxt]
                raise PipelineSpecError(
                    f"{where}: Circular dependency detected in dataflow: {' → '.join(loop)}. A session cannot "
                    "depend on its own outputs: remove one of these wires."
                )
            if state.get(nxt) is None:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in list(edges):
        if state.get(node) is None:
            visit(node)


def _parse_names(obj: Mapping[str, Any], fmt: str, where: str, what: str) -> CacheNames | None:
    from inference4py.engine.kv_cache import CacheNames

    separate = ("past_key_pattern", "past_value_pattern", "present_key_pattern", "present_value_pattern")
    combined = ("past_pattern", "present_pattern")
    given_sep = [k for k in separate if obj.get(k)]
    given_comb = [k for k in combined if obj.get(k)]
    if fmt == "auto":
        if given_sep or given_comb:
            raise PipelineSpecError(
                f'{where}: {what} gives name patterns with "format": "auto". Set "format": "separate" (key/value '
                'patterns) or "combined" (past_pattern/present_pattern) to use them.'
            )
        return None
    needed = separate if fmt == "separate" else combined
    missing = [k for k in needed if not obj.get(k)]
    if missing:
        raise PipelineSpecError(
            f"{where}: {what} with format {fmt!r} needs {', '.join(needed)}; missing {', '.join(missing)}. "
            'Use "{layer}" where the layer index goes, e.g. "past_key_values.{layer}.key".'
        )
    wrong = given_comb if fmt == "separate" else given_sep
    if wrong:
        raise PipelineSpecError(f"{where}: {what} with format {fmt!r} does not take {', '.join(wrong)}.")
    try:
        if fmt == "separate":
            return CacheNames.separate(*(obj[k] for k in separate))
        return CacheNames.combined(obj["past_pattern"], obj["present_pattern"])
    except PipelineSpecError as exc:
        raise PipelineSpecError(f"{where}: {exc}") from exc


def _positive_int_or_none(value: Any, where: str, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PipelineSpecError(f"{where}: {what} must be a positive integer, got {value!r}.")
    return value


def _parse_state(raw: Mapping[str, Any], spec: PipelineSpec, where: str) -> StateSpec:
    kv_raw = raw.get("kv_cache") or {}
    if not isinstance(kv_raw, Mapping):
        raise PipelineSpecError(f"{where}: state.kv_cache must be an object.")
    _check_keys(
        kv_raw,
        {
            "format",
            "past_key_pattern",
            "past_value_pattern",
            "present_key_pattern",
            "present_value_pattern",
            "past_pattern",
            "present_pattern",
            "num_kv_heads",
            "head_size",
            "share_buffer",
            "sliding_window",
        },
        where,
        "state.kv_cache",
    )
    fmt = kv_raw.get("format", "auto")
    if fmt not in KV_FORMATS:
        raise PipelineSpecError(f'{where}: unknown kv_cache format "{fmt}". Valid formats: {", ".join(KV_FORMATS)}.')
    names = _parse_names(kv_raw, fmt, where, "state.kv_cache")
    share = kv_raw.get("share_buffer", False)
    if not isinstance(share, bool):
        raise PipelineSpecError(f"{where}: state.kv_cache.share_buffer must be true or false.")
    kv = KVCacheSpec(
        fmt,
        names,
        _positive_int_or_none(kv_raw.get("num_kv_heads"), where, "state.kv_cache.num_kv_heads"),
        _positive_int_or_none(kv_raw.get("head_size"), where, "state.kv_cache.head_size"),
        share,
        _positive_int_or_none(kv_raw.get("sliding_window"), where, "state.kv_cache.sliding_window"),
    )

    cross = None
    cross_raw = raw.get("cross_cache")
    # a wired init session has no cross cache, nor has a single-pass pipeline's (there is no decoder)
    init = [spec.roles["encoder"]] if "encoder" in spec.roles and "decoder" in spec.roles else []
    if cross_raw is not None:
        if not isinstance(cross_raw, Mapping):
            raise PipelineSpecError(f"{where}: state.cross_cache must be an object.")
        _check_keys(
            cross_raw,
            {
                "source",
                "frozen",
                "past_key_pattern",
                "past_value_pattern",
                "present_key_pattern",
                "present_value_pattern",
            },
            where,
            "state.cross_cache",
        )
        if init:
            source = cross_raw.get("source", init[0])
            if source not in init:
                raise PipelineSpecError(
                    f'{where}: state.cross_cache.source "{source}" is not an init session of the flow '
                    f"(init sessions: {', '.join(init)}). Name the encoder session there."
                )
            frozen = cross_raw.get("frozen", True)
            if frozen is not True:
                raise PipelineSpecError(
                    f"{where}: state.cross_cache.frozen must be true: the runtimes compute the "
                    "cross-attention cache once per generation."
                )
            has_patterns = any(
                cross_raw.get(k)
                for k in ("past_key_pattern", "past_value_pattern", "present_key_pattern", "present_value_pattern")
            )
            cross_names = _parse_names(cross_raw, "separate" if has_patterns else "auto", where, "state.cross_cache")
            cross = CrossCacheSpec(source, True, cross_names)
    elif init:
        cross = CrossCacheSpec(init[0], True, None)

    pos_raw = raw.get("position_ids") or {}
    if not isinstance(pos_raw, Mapping):
        raise PipelineSpecError(f"{where}: state.position_ids must be an object.")
    _check_keys(pos_raw, {"strategy", "input_name"}, where, "state.position_ids")
    strategy = pos_raw.get("strategy", "auto")
    if strategy not in POSITION_STRATEGIES:
        raise PipelineSpecError(
            f'{where}: unknown position_ids strategy "{strategy}". Valid options: {", ".join(POSITION_STRATEGIES)} '
            '("auto" feeds 1-D positions when the graph has the input, "default" requires it, "none" means the graph '
            "computes positions itself)."
        )
    input_name = pos_raw.get("input_name", "position_ids")
    if not isinstance(input_name, str) or not input_name:
        raise PipelineSpecError(f"{where}: state.position_ids.input_name must be the name of a graph input.")
    return StateSpec(kv, cross, PositionIdsSpec(strategy, input_name))


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_tokens(raw: Any, where: str) -> TokenSpec:
    if raw is None:
        return TokenSpec()
    if not isinstance(raw, Mapping):
        raise PipelineSpecError(f'{where}: "tokens" must be an object like {{"eos": [2], "pad": 0}}.')
    _check_keys(raw, set(_TOKEN_KEYS), where, '"tokens"')
    values: dict[str, Any] = {}
    for key in _TOKEN_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        if key == "eos":
            ids = value if isinstance(value, list) else [value]
            if not ids or not all(_token_id(v) for v in ids):
                raise PipelineSpecError(
                    f"{where}: tokens.eos must be a token id or a list of token ids, got {value!r}."
                )
            values[key] = tuple(ids)
        elif not _token_id(value):
            raise PipelineSpecError(f"{where}: tokens.{key} must be a non-negative token id, got {value!r}.")
        else:
            values[key] = value
    return TokenSpec(**values)


def _parse_generation(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise PipelineSpecError(f'{where}: "generation" must be an object like {{"max_length": 256}}.')
    _check_keys(raw, set(GENERATION_KEYS), where, '"generation"')
    for key, value in raw.items():
        if not _valid_generation_value(key, value):
            raise PipelineSpecError(f"{where}: generation.{key} has the wrong type ({value!r}).")
    return dict(raw)
