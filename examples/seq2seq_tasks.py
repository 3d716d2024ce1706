"""Summarize, translate, correct and write SQL with the encoder-decoder task classes.

python examples/seq2seq_tasks.py                      # the presets, from the Hub
python examples/seq2seq_tasks.py --fixtures tests/fixtures/models   # offline, tiny random models
"""

import argparse

from inference4py import BartSummarizer, CoeditGrammarCorrector, Language, MarianTranslator, T5SqlGenerator

ARTICLE = (
    "The city council approved a new budget on Tuesday after months of debate. The plan adds money for "
    "public transport and schools, and cuts spending on road building."
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", default=None, help="folder with bart/, marian/, t5/ models instead of the Hub")
    args = parser.parse_args()

    def pick(builder, name):
        # the tiny fixtures accept 64 input tokens: truncate the article for them
        return builder.model_path(f"{args.fixtures}/{name}").max_new_tokens(12).truncate() if args.fixtures else builder

    with pick(BartSummarizer.distilBartCnn(), "bart").build() as bart:
        print("summary:", bart.summarize(ARTICLE))
    with pick(MarianTranslator.opusMtEnDe(), "marian").build() as mt:
        print("German:", mt.translate("How are you?", target=Language.DE))
    with pick(CoeditGrammarCorrector.coeditBase(), "t5").build() as coedit:
        print("corrected:", coedit.correct("I has a apple"))
    with pick(T5SqlGenerator.t5SmallAwesome(), "t5").build() as sql:
        print("SQL:", sql.generate_sql("How many users are there?", "CREATE TABLE users (id INT, name TEXT)"))


if __name__ == "__main__":
    main()
