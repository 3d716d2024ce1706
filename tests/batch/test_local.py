"""run_batch in this process: every row once, each equal to the library's result for that row alone."""

from __future__ import annotations

import json

import pytest

from inference4py import BartSummarizer, FlanT5TextGenerator, MarianTranslator
from inference4py.batch import RESULT_COLUMNS, read_results, row_seed, run_batch
from inference4py.batch.runner import _Stop
from inference4py.cli import main
from inference4py.errors import ConfigurationError, InvalidInputError
from tests.batch.conftest import (
    BART,
    LONG,
    MARIAN,
    PROMPTS,
    QWEN,
    T5,
    by_id,
    write_csv,
    write_jsonl,
    write_parquet,
)


def test_generate_rows_equal_alone_and_bad_rows_are_error_rows(tmp_path, qwen):
    records = [{"prompt": p} for p in PROMPTS[:3]] + [{"prompt": ""}, {"prompt": LONG}, {"other": 1}]
    records += [{"prompt": p} for p in PROMPTS[3:]]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    report = run_batch(src, tmp_path / "out", model=QWEN, max_new_tokens=12, batch_size=3, progress=False)
    rows = by_id(read_results(tmp_path / "out"))
    assert sorted(rows, key=int) == [str(i) for i in range(len(records))]
    assert report.total == report.completed == len(records) and report.errors == 3 and report.skipped == 0
    assert len(report.parts) == 4  # ceil(10 / 3)
    for i, record in enumerate(records):
        row = rows[str(i)]
        assert set(row) == set(RESULT_COLUMNS)
        if i in (3, 4, 5):
            assert row["text"] is None and row["finish_reason"] is None
            continue
        alone = qwen.generate(record["prompt"], max_new_tokens=12)
        assert row["error"] is None
        assert row["text"] == alone.text
        assert row["finish_reason"] == alone.finish_reason
        assert (row["prompt_tokens"], row["completion_tokens"]) == (alone.prompt_tokens, alone.generated_tokens)
    assert rows["3"]["error"].startswith("InvalidInputError: The prompt is empty")
    assert rows["4"]["error"].startswith("PromptTooLongError:") and "Shorten the prompt" in rows["4"]["error"]
    assert "missing or null" in rows["5"]["error"]
    assert report.completion_tokens == sum(r["completion_tokens"] or 0 for r in rows.values())


def test_default_length_is_each_rows_own(tmp_path, qwen):
    # without max_new_tokens each row's limit is its own room in the 128-token context, as alone
    prompts = ["Hi", " ".join(["sea"] * 60), "Once upon a time"]
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p} for p in prompts])
    run_batch(src, tmp_path / "out", model=QWEN, batch_size=3, progress=False)
    rows = by_id(read_results(tmp_path / "out"))
    for i, prompt in enumerate(prompts):
        alone = qwen.generate(prompt)
        assert rows[str(i)]["text"] == alone.text
        assert rows[str(i)]["completion_tokens"] == alone.generated_tokens


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_chat_rows_from_each_format(tmp_path, qwen, fmt):
    conversations = [
        [{"role": "user", "content": "Hello"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the sea?"}],
        "A plain string is one user message",
        [],
    ]
    records = [{"key": f"k{i}", "messages": m} for i, m in enumerate(conversations)]
    writer = {"jsonl": write_jsonl, "csv": write_csv, "parquet": write_parquet}[fmt]
    if fmt == "parquet":  # one column type per Parquet column: the plain string row stays in JSONL / CSV
        records = [r for r in records if not isinstance(r["messages"], str)]
    src = writer(tmp_path / f"in.{fmt}", records)
    run_batch(src, tmp_path / "out", model=QWEN, task="chat", id_column="key", max_new_tokens=8, progress=False)
    rows = by_id(read_results(tmp_path / "out"))
    assert set(rows) == {r["key"] for r in records}
    for record in records:
        messages = record["messages"]
        row = rows[record["key"]]
        if messages == []:
            assert row["error"].startswith("InvalidInputError:")
            continue
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        alone = qwen.generate(messages, max_new_tokens=8)
        assert (row["text"], row["prompt_tokens"]) == (alone.text, alone.prompt_tokens)


def test_summarize_t5_and_bart_rows_equal_alone(tmp_path):
    texts = ["The sea was calm today.", "", "A storm came over the hills and the rain fell for hours.", LONG, "Hi"]
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    for name, folder, cls in (("t5", T5, FlanT5TextGenerator), ("bart", BART, BartSummarizer)):
        out = tmp_path / name
        run_batch(src, out, model=folder, task="summarize", max_new_tokens=10, batch_size=4, progress=False)
        rows = by_id(read_results(out))
        assert len(rows) == len(texts)
        with cls.builder().model_path(folder).build() as task:
            for i, text in enumerate(texts):
                row = rows[str(i)]
                if not text:
                    assert row["error"].startswith("InvalidInputError:") and "empty" in row["error"]
                    continue
                if text is LONG and name == "bart":  # bart's fixture has 64 positions
                    assert row["error"].startswith("PromptTooLongError:")
                    continue
                alone = task.summarize(text, max_new_tokens=10)
                assert row["error"] is None
                assert (row["text"], row["completion_tokens"]) == (alone.text, alone.generated_tokens)


def test_translate_marian_rows_equal_alone(tmp_path):
    texts = ["Hello world", "How are you today?", "   "]
    src = write_csv(tmp_path / "in.csv", [{"text": t} for t in texts])
    run_batch(src, tmp_path / "out", model=MARIAN, task="translate", max_new_tokens=10, progress=False)
    rows = by_id(read_results(tmp_path / "out"))
    with MarianTranslator.builder().model_path(MARIAN).build() as mt:
        for i, text in enumerate(texts[:2]):
            alone = mt.translate(text, max_new_tokens=10)
            assert rows[str(i)]["text"] == alone.text
    assert "empty" in rows["2"]["error"]


def test_translate_with_t5_needs_both_languages(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "Hello"}])
    with pytest.raises(ConfigurationError, match="--source en --target fr"):
        run_batch(src, tmp_path / "out", model=T5, task="translate", progress=False)
    run_batch(
        src, tmp_path / "out2", model=T5, task="translate", source_language="en", target_language="fr",
        max_new_tokens=6, progress=False,
    )  # fmt: skip
    with FlanT5TextGenerator.builder().model_path(T5).build() as t5:
        assert read_results(tmp_path / "out2")[0]["text"] == t5.translate("Hello", "en", "fr", max_new_tokens=6).text


def test_task_the_model_cannot_run_is_refused(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "Hello"}])
    with pytest.raises(ConfigurationError, match="runs on t5 or marian models"):
        run_batch(src, tmp_path / "out", model=BART, task="translate", progress=False)


def test_sampling_seed_does_not_depend_on_batching(tmp_path, qwen):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p} for p in PROMPTS])
    options = dict(model=QWEN, seed=7, temperature=1.0, max_new_tokens=10, progress=False)
    run_batch(src, tmp_path / "a", batch_size=1, **options)
    run_batch(src, tmp_path / "b", batch_size=4, **options)
    run_batch(src, tmp_path / "c", batch_size=4, **{**options, "seed": 8})
    a, b, c = (by_id(read_results(tmp_path / x)) for x in "abc")
    assert {k: r["text"] for k, r in a.items()} == {k: r["text"] for k, r in b.items()}
    assert {k: r["text"] for k, r in a.items()} != {k: r["text"] for k, r in c.items()}
    for i, prompt in enumerate(PROMPTS):
        alone = qwen.generate(prompt, seed=row_seed(7, str(i)), temperature=1.0, max_new_tokens=10)
        assert a[str(i)]["text"] == alone.text


def test_row_seed_formula():
    import hashlib

    assert row_seed(7, "42") == int.from_bytes(hashlib.sha256(b"7:42").digest()[:8], "big")
    assert row_seed(7, "42") != row_seed(7, "43") != row_seed(8, "43")


def test_a_failing_row_is_an_error_row_and_the_others_are_what_they_give_alone(qwen):
    """Decoder rows run on the scheduler: a row that cannot run fails alone, before or during its batch."""
    from inference4py.batch.adapters import load_adapter
    from inference4py.batch.inputs import InputRow

    adapter = load_adapter(QWEN, task="generate", overrides={"max_new_tokens": 6})
    too_long = "many words " * 4000  # more tokens than the model's context
    prompts = [PROMPTS[0], PROMPTS[1], too_long, PROMPTS[3]]
    results = adapter.run([InputRow(str(i), p) for i, p in enumerate(prompts)])
    assert [r["id"] for r in results] == ["0", "1", "2", "3"]
    assert results[2]["error"].startswith("PromptTooLongError: ")
    for i in (0, 1, 3):
        assert results[i]["error"] is None
        assert results[i]["text"] == qwen.generate(PROMPTS[i], max_new_tokens=6).text
    adapter.close()


def test_resume_after_interruption_redoes_nothing_and_loses_nothing(tmp_path):
    records = [{"id": f"r{i}", "prompt": PROMPTS[i % len(PROMPTS)] + f" {i}"} for i in range(11)]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    options = dict(model=QWEN, id_column="id", max_new_tokens=6, batch_size=3, progress=False)
    with pytest.raises(_Stop):
        run_batch(src, tmp_path / "out", _stop_after_parts=2, **options)
    first = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("part-*")}
    assert len(first) == 2 and len(read_results(tmp_path / "out")) == 6
    (tmp_path / "out" / ".part-00002.parquet.tmp-999").write_bytes(b"half a part")  # a write the kill cut short
    report = run_batch(src, tmp_path / "out", **options)
    assert (report.skipped, report.completed) == (6, 5)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").glob("part-0000[01].*")} == first  # untouched
    resumed = by_id(read_results(tmp_path / "out"))
    run_batch(src, tmp_path / "whole", **options)
    whole = by_id(read_results(tmp_path / "whole"))
    assert resumed == whole and set(resumed) == {r["id"] for r in records}
    again = run_batch(src, tmp_path / "out", **options)
    assert (again.skipped, again.completed, again.parts) == (11, 0, [])


def test_jsonl_output_and_other_settings_refused(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p} for p in PROMPTS[:2]])
    run_batch(src, tmp_path / "out", model=QWEN, max_new_tokens=4, output_format="jsonl", progress=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["job.json", "part-00000.jsonl"]
    assert [r["id"] for r in read_results(tmp_path / "out")] == ["0", "1"]
    with pytest.raises(ConfigurationError, match="generation differ.*new output folder"):
        run_batch(src, tmp_path / "out", model=QWEN, max_new_tokens=5, output_format="jsonl", progress=False)


def test_input_errors_name_the_fix(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a", "id": 1}, {"prompt": "b", "id": 1}])
    with pytest.raises(ConfigurationError, match="no column 'text'; its columns are id, prompt"):
        run_batch(src, tmp_path / "o1", model=QWEN, column="text", progress=False)
    with pytest.raises(InvalidInputError, match="The id '1' appears twice"):
        run_batch(src, tmp_path / "o2", model=QWEN, id_column="id", progress=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": \n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="Line 2 of bad.jsonl is not valid JSON"):
        run_batch(bad, tmp_path / "o3", model=QWEN, progress=False)
    with pytest.raises(ConfigurationError, match="Unknown batch task 'nope': use one of generate, chat"):
        run_batch(src, tmp_path / "o4", model=QWEN, progress=False, task="nope")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ConfigurationError, match="name it .jsonl, .csv or .parquet"):
        run_batch(tmp_path / "x.txt", tmp_path / "o4", model=QWEN, progress=False)
    with pytest.raises(InvalidInputError, match="does not exist"):
        run_batch(tmp_path / "missing.jsonl", tmp_path / "o5", model=QWEN, progress=False)
    with pytest.raises(ConfigurationError, match="batch_size must be a positive integer"):
        run_batch(src, tmp_path / "o7", model=QWEN, batch_size=0, progress=False)


def test_sampled_decoder_rows_are_decoded_together(qwen):
    from inference4py.batch.adapters import load_adapter
    from inference4py.batch.inputs import InputRow

    adapter = load_adapter(QWEN, task="generate", seed=3, overrides={"temperature": 0.9, "max_new_tokens": 6})
    try:
        rows = [InputRow(f"id{i}", p) for i, p in enumerate(PROMPTS[:4])] + [InputRow("bad", "")]
        results = adapter.run(rows)
        stats = adapter._batched.stats
        assert stats.completed == 4 and stats.step_rows > stats.steps  # more than one row per decode step
        assert results[-1]["error"].startswith("InvalidInputError:")
        for row, got in zip(rows[:4], results):
            alone = qwen.generate(row.value, seed=row_seed(3, row.id), temperature=0.9, max_new_tokens=6)
            assert (got["text"], got["completion_tokens"]) == (alone.text, alone.generated_tokens)
    finally:
        adapter.close()


def test_progress_shows_rows_rate_tokens_and_errors(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p} for p in [*PROMPTS[:3], ""]])
    run_batch(src, tmp_path / "out", model=QWEN, max_new_tokens=4, batch_size=2)
    err = capsys.readouterr().err
    assert "4/4" in err and "row/s" in err and "tok/s" in err and "1 errors" in err
    run_batch(src, tmp_path / "quiet", model=QWEN, max_new_tokens=4, batch_size=2, progress=False)
    assert capsys.readouterr().err == ""


def test_json_schema_rows_equal_alone(tmp_path, qwen):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p} for p in PROMPTS[:4]])
    (tmp_path / "schema.json").write_text(json.dumps(schema), encoding="utf-8")
    argv = ["batch", "-m", QWEN, "-i", str(src), "-o", str(tmp_path / "out"), "--json-schema"]
    assert main([*argv, str(tmp_path / "schema.json"), "--max-new-tokens", "12", "--no-progress"]) == 0
    rows = by_id(read_results(tmp_path / "out"))
    for i, prompt in enumerate(PROMPTS[:4]):
        alone = qwen.generate(prompt, json_schema=schema, max_new_tokens=12)
        assert rows[str(i)]["text"] == alone.text
        assert alone.text.startswith("{")  # the schema did constrain the output
        assert qwen.generate(prompt, max_new_tokens=12).text != alone.text
    with pytest.raises(ConfigurationError, match="json_schema is not valid JSON"):
        run_batch(src, tmp_path / "o2", model=QWEN, json_schema="{nope", progress=False)
    assert main([*argv, str(tmp_path / "missing.json")]) == 2
