"""transformers' word timestamps on the real Whisper checkpoints: the reference of tests/real/test_real_whisper_words.py.

For each model folder ``<real>/whisper-{base,tiny.en}-hf`` (built by tools/real/whisper.py) and each
English espeak-ng clip, transformers 4.57 ``generate(return_timestamps=True,
return_token_timestamps=True, return_segments=True, attention_mask=...)`` (greedy, fp32, the feature
extractor's numpy path): every segment's ids and token timestamps, and its words as the ASR pipeline
makes them (tools/fixtures/whisper_words.py ``_words``: transformers' ``_combine_tokens_into_words``;
a word spans the timestamp of the token before it to its last token's).

Run ``python -m tools.real.whisper_words [--real-dir DIR]`` after ``python -m tools.real.whisper``.
Writes ``<real>/references/whisper_words.json``.

``--vad`` writes ``<real>/references/whisper_vad.json`` instead: transformers' words (whisper-base) on
the speech of the voice activity detection recording (tests/fixtures/vad: clip A, 20 s of noise,
clip B, composed by tools/vad_reference.py's recipe), cut at faster-whisper's regions under its
default options (``reference.json``) and laid end to end, as ``transcribe(vad=...)`` decodes it.
The times are in that chunk's audio; the test maps them back through the regions.

``--beams`` writes ``<real>/references/whisper_beams.json``: the same as the main references with
``num_beams`` (``BEAM_CASES``), for word timestamps with beam search.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tools.fixtures.common import write_json
from tools.fixtures.whisper_words import _words
from tools.real.common import real_dir
from tools.real.whisper import read_clip

MODELS = {"whisper-base": ("en-short", "en-paragraph", "en-long"), "whisper-tiny.en": ("en-short", "en-paragraph")}
BEAM_CASES = {"whisper-base": {"en-short": 5, "en-paragraph": 3}}  # model -> clip -> num_beams


def build(real: Path, *, beams: bool = False) -> None:
    import torch
    import transformers
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    out: dict[str, Any] = {}
    plan = {m: tuple(c) for m, c in BEAM_CASES.items()} if beams else MODELS
    for name, clips in plan.items():
        folder = real / f"{name}-hf"
        model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        tok = WhisperTokenizerFast.from_pretrained(folder)
        fe = WhisperFeatureExtractor.from_pretrained(folder)
        tb = tok.convert_tokens_to_ids("<|0.00|>")
        if tb is None or tb == tok.unk_token_id:
            tb = model.generation_config.no_timestamps_token_id + 1  # openai's layout
        multilingual = bool(getattr(model.generation_config, "is_multilingual", False))
        cases = {}
        for clip in clips:
            samples = read_clip(real, clip)
            long = len(samples) > 30 * 16000
            fe._torch_extract_fbank_features = fe._np_extract_fbank_features  # the numpy reference path
            inputs = fe(
                samples,
                sampling_rate=16000,
                return_tensors="pt",
                return_attention_mask=True,
                **({"truncation": False, "padding": "longest"} if long else {}),
            )
            kwargs = {"language": "en"} if multilingual else {}
            with torch.no_grad():
                gen = model.generate(
                    inputs.input_features,
                    attention_mask=inputs.attention_mask,
                    return_timestamps=True,
                    return_token_timestamps=True,
                    return_segments=True,
                    num_beams=BEAM_CASES[name][clip] if beams else 1,
                    **kwargs,
                )
            segments = []
            for s in gen["segments"][0]:
                tokens = s["tokens"].tolist()
                times = [float(t) for t in s["token_timestamps"]]
                segments.append(
                    {
                        "start": round(float(s["start"]), 6),
                        "end": round(float(s["end"]), 6),
                        "token_ids": tokens,
                        "token_timestamps": [round(t, 6) for t in times],
                        "words": _words(tok, tokens, times, tb),
                    }
                )
            cases[clip] = {"language": "en" if multilingual else None, "segments": segments}
            if beams:
                cases[clip]["num_beams"] = BEAM_CASES[name][clip]
            print(f"[whisper_words] {name} {clip}: {sum(len(s['words']) for s in segments)} words", flush=True)
        out[name] = {
            "folder": f"{name}-optimum",
            "alignment_heads": model.generation_config.alignment_heads,
            "cases": cases,
        }
    write_json(
        real / "references" / ("whisper_beams.json" if beams else "whisper_words.json"),
        {
            "generator": "tools/real/whisper_words.py" + (" --beams" if beams else ""),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "notes": [
                "generate(input_features, attention_mask=..., return_timestamps=True, return_token_timestamps=True, "
                "return_segments=True), "
                + ("beam search (num_beams per case)" if beams else "greedy")
                + " fp32; words: transformers' _combine_tokens_into_words over each "
                "segment's text tokens, spanning the previous token's timestamp to the last token's, rounded to 0.01 s."
            ],
            "models": out,
        },
    )


def build_vad(real: Path) -> None:
    import json

    import numpy as np
    import torch
    import transformers
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast

    from tools.vad_reference import OUT, compose
    from tools.vad_reference import read_clip as read_vad_clip

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    reference = json.loads((OUT / "reference.json").read_text(encoding="utf-8"))
    audio, placed = compose(read_vad_clip("speech-a"), read_vad_clip("speech-b"), reference["recipe"])
    regions = [tuple(r) for r in reference["regions"]["faster_whisper_defaults"]["regions"]]
    chunk = np.concatenate([audio[s:e] for s, e in regions])
    folder = real / "whisper-base-hf"
    model = WhisperForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    tok = WhisperTokenizerFast.from_pretrained(folder)
    fe = WhisperFeatureExtractor.from_pretrained(folder)
    fe._torch_extract_fbank_features = fe._np_extract_fbank_features  # the numpy reference path
    tb = tok.convert_tokens_to_ids("<|0.00|>")
    inputs = fe(chunk, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        gen = model.generate(
            inputs.input_features,
            attention_mask=inputs.attention_mask,
            language="en",
            return_timestamps=True,
            return_token_timestamps=True,
            return_segments=True,
        )
    segments = []
    for s in gen["segments"][0]:
        tokens = s["tokens"].tolist()
        times = [float(t) for t in s["token_timestamps"]]
        segments.append(
            {
                "start": round(float(s["start"]), 6),
                "end": round(float(s["end"]), 6),
                "token_ids": tokens,
                "words": _words(tok, tokens, times, tb),
            }
        )
    write_json(
        real / "references" / "whisper_vad.json",
        {
            "generator": "tools/real/whisper_words.py --vad",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "notes": [
                "whisper-base, greedy fp32, language en; the VAD recording's speech regions (faster-whisper's "
                "defaults, tests/fixtures/vad/reference.json) laid end to end; segment and word times in that "
                "chunk's audio."
            ],
            "clip_positions": [list(p) for p in placed],
            "regions": [list(r) for r in regions],
            "segments": segments,
        },
    )
    print(f"[whisper_words] vad: {sum(len(s['words']) for s in segments)} words", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-dir", type=Path, default=None)
    parser.add_argument("--vad", action="store_true", help="only references/whisper_vad.json (the VAD recording)")
    parser.add_argument("--beams", action="store_true", help="only references/whisper_beams.json (num_beams)")
    args = parser.parse_args()
    root = Path(args.real_dir).expanduser() if args.real_dir else real_dir()
    if args.vad:
        build_vad(root)
    else:
        build(root, beams=args.beams)
