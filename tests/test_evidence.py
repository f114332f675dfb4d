"""The answer pipeline's retrieval and evidence steps, without a model:
units and their spans, evidence selection, the full-text index, hybrid
retrieval finding what the embedding misses."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from flask_app.inference.fakes import HashEmbedder, ScriptedBackend
from flask_app.inference.llm import LLM
from flask_app.rag import evidence, retrieval
from flask_app.rag import text as text_units
from flask_app.rag.answer import AnswerConfig, ground, repeating_tail
from flask_app.rag.pipeline import Question
from flask_app.rag.text import STOPWORDS, codes, stem, term_set, terms, units
from flask_app.store import Collection, Hit

PDB = (
    "r(eturn)\n\nContinue execution until the current function returns.\n\n"
    "c(ont(inue))\n\nContinue execution, only stop when a breakpoint is encountered.\n\n"
    "j(ump) lineno\n\nSet the next line that will be executed.  Only available in the "
    "bottom-most frame."
)


def test_units_index_the_passage_exactly_even_after_emoji_and_cjk() -> None:
    passage = "🙂 東京 is big. It has 14 million people! 漢字 are used.\n\nSecond paragraph here."
    found = units(passage, max_chars=30)
    assert found and all(passage[u.start : u.end] == u.text for u in found)
    assert found[-1].text == "Second paragraph here."


def test_a_heading_stays_with_the_text_it_introduces() -> None:
    found = units(PDB)
    assert found[0].text == "r(eturn)\n\nContinue execution until the current function returns."
    assert found[2].text.startswith("j(ump) lineno\n\nSet the next line")


OPTIONS = """Mandatory arguments to long options are mandatory for short options too.
  -a, --all                  do not ignore entries starting with .
      --author               with -l, print the author of each file
      --block-size=SIZE      with -l, scale sizes by SIZE when printing them;
                             e.g., '--block-size=M'; see SIZE format below
  -d, --directory            list directories themselves, not their contents"""


def test_an_option_table_is_cut_into_one_unit_per_option() -> None:
    found = units(OPTIONS)
    assert [u.text.split()[0] for u in found] == [
        "Mandatory",
        "-a,",
        "--author",
        "--block-size=SIZE",
        "-d,",
    ]
    assert found[3].text.endswith("see SIZE format below")  # with its continuation line
    assert all(OPTIONS[u.start : u.end] == u.text for u in found)
    chosen = evidence.select("Which option prints the author of each file?", [OPTIONS])
    assert chosen.best is not None and chosen.best.text.startswith("--author")


def test_bullets_are_units_and_hard_wrapped_prose_stays_whole() -> None:
    text = (
        "The museum opens at ten\nand closes at six,\nevery day but Monday.\n\n"
        "- Tickets: 12 EUR\n- Guided tours: Sundays"
    )
    assert [u.text for u in units(text)] == [
        "The museum opens at ten\nand closes at six,\nevery day but Monday.",
        "- Tickets: 12 EUR",
        "- Guided tours: Sundays",
    ]


def test_terms_drop_function_words_and_meet_inflections() -> None:
    assert terms("Which pdb command continues until the current function exits?") == [
        "pdb",
        "command",
        "continu",
        "current",
        "function",
        "exit",
    ]
    assert stem("returns") == stem("return") and "which" in STOPWORDS
    assert {"str.zfill", "str", "zfill"} <= term_set("Use str.zfill(5).")


def test_evidence_selection_picks_the_unit_that_answers_with_its_span() -> None:
    other = "The debugger supports aliases. Aliases can have parameters."
    sel = evidence.select(
        "Which pdb command sets the next line that will be executed?",
        [other, PDB],
        evidence.Scoring(units_wanted=1, neighbours=0),
    )
    assert sel.best is not None and sel.best.passage == 1
    assert sel.best.text.startswith("j(ump) lineno")
    assert PDB[sel.best.start : sel.best.end] == sel.best.text
    assert sel.best_score > 0.4  # the default answer_min_evidence
    assert [p.passage for p in sel.pieces] == [1]


POOL = (
    "Riverside pool.\n\n"
    "On Saturdays and Sundays the pool opens at 9 am and closes at 6 pm, and the "
    "teaching pool keeps the same hours.\n\n"
    "Lockers take a coin.\n\n"
    "Children under eight must be with an adult in the water at all times."
)


def test_a_unit_long_enough_to_stand_alone_is_shown_without_neighbours() -> None:
    long_question = "When does the pool open on Saturdays?"
    short_question = "What do the lockers take?"
    with_neighbours = evidence.Scoring(units_wanted=1)
    alone_15 = evidence.Scoring(units_wanted=1, alone_words=15)

    def shown(question: str, scoring: evidence.Scoring) -> str:
        return "|".join(p.text for p in evidence.select(question, [POOL], scoring).pieces)

    # the weekend line (25 words) alone, instead of with the heading and the lockers
    assert shown(long_question, with_neighbours).startswith("Riverside pool.")
    assert shown(long_question, alone_15) == (
        "On Saturdays and Sundays the pool opens at 9 am and closes at 6 pm, and the "
        "teaching pool keeps the same hours."
    )
    # a short unit keeps the lines around it either way
    assert shown(short_question, alone_15) == shown(short_question, with_neighbours)
    assert "Lockers take a coin." in shown(short_question, alone_15)
    assert shown(short_question, alone_15) != "Lockers take a coin."


def test_the_answer_config_carries_the_rule_into_the_prompt() -> None:
    llm = LLM(ScriptedBackend("9 am"), max_waiters=1, timeout=5)
    question = Question(query="When does the pool open on Saturdays?", top_k=1)

    def prompt(config: AnswerConfig) -> str:
        grounding = ground(llm, _Ranked([POOL]), question, config)
        assert grounding.prompt is not None
        return grounding.prompt.messages[-1]["content"]

    assert "Lockers" in prompt(AnswerConfig(evidence_units=1))
    assert "Lockers" not in prompt(AnswerConfig(evidence_units=1, evidence_alone_words=15))


def test_no_evidence_is_taken_from_another_products_passage() -> None:
    """Asked about the P5, the P3 sheet's "not for swimming" line reads as
    close as the P5's own and says the opposite: a passage naming product
    codes, none of them the question's, gives no evidence; one naming no
    code (a later chunk of the same manual) still may."""
    p3 = "Pulse P3 earbuds.\n\nRated IPX4: safe with sweat and rain, but not for swimming."
    p5 = "Pulse P5 earbuds.\n\nRated IPX7: they survive being submerged for 30 minutes."
    later = "The case charges wirelessly on any Qi pad overnight."

    def used(question: str, passages: list[str]) -> set[int]:
        chosen = evidence.select(question, passages, evidence.Scoring())
        return {piece.passage for piece in chosen.pieces}

    assert used("Can I go swimming with the P5?", [p3, p5]) == {1}
    assert used("Can I go swimming with the P5?", [p3, "Pulse P5 earbuds.", later]) == {1, 2}
    # a code no passage names tells nothing apart
    assert used("Can I go swimming with the P7?", [p3, p5]) == {0, 1}
    # a question naming no code, or the P3, may still get the P3's line
    assert 0 in used("Can I go swimming with these?", [p3, p5])
    assert used("Can I go swimming with my P3s?", [p3, p5]) == {0}


def test_a_feature_code_does_not_make_a_passage_another_products() -> None:
    """A sheet is about the code it names first: "IPv6" in a question names a
    feature, not a product, and leaves the router's sheet (which says
    "IPv4") in; naming the router keeps its sheet and leaves the mesh's out."""
    router = "Arc AX3000 router. Dual band, four ports, IPv4 only out of the box."
    mesh = "Arc R9 mesh. Three units cover a house; IPv6 is on by default."
    kept = [
        {piece.passage for piece in evidence.select(question, [router, mesh]).pieces}
        for question in ("Does it support IPv6?", "Does the AX3000 support IPv6?")
    ]
    assert kept == [{0, 1}, {0}]
    assert evidence.on_subject("Does it support IPv6?", [router, mesh]) == [True, True]
    assert evidence.on_subject("Is the R9 on IPv6?", [router, mesh]) == [False, True]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("Can I wear my P3 earbuds in the pool?", {"p3"}),
        ("My P3s won't pair, and the AX3000's light is red", {"p3", "ax3000"}),
        ("Rated IPX7 (x86-64 build)", {"ipx7", "x86"}),
        ("On the 19th at 4pm, sort by 2K or str.zfill in utf-8", set()),
        # an underscore separates words; only an "s" right after a digit is a plural
        ("I_found_X1_files in r\\xe9pertoires", {"x1", "xe9pertoires"}),
    ],
)
def test_product_codes_are_letters_then_a_digit(text: str, named: set[str]) -> None:
    assert codes(text) == named


def test_a_citation_points_at_the_sentence_holding_the_answer() -> None:
    text = (
        "## Freeze windows\n\nDeploys are frozen on Fridays and during the last week of "
        "December. Hotfixes during a freeze need approval from the\nSRE on call."
    )
    question = "When are deploys frozen?"
    (piece,) = evidence.select(question, [text]).pieces
    assert piece.text == text  # the model sees the whole paragraph

    def cited(answer: str) -> str:
        start, end = evidence.cited_sentence(answer, question, text, piece)
        return text[start:end]

    want = "Deploys are frozen on Fridays and during the last week of December."
    assert cited("On Fridays and in the last week of December.") == want
    assert cited("They need approval from the SRE on call.") == (
        "Hotfixes during a freeze need approval from the\nSRE on call."
    )
    # an answer drawing on both sentences cites both
    assert cited("On Fridays; hotfixes need the SRE on call.") == text[text.index("Deploys") :]
    # nothing of the answer in any sentence: the piece's best unit
    assert cited("Deploys are frozen.") == text[piece.focus_start : piece.focus_end]


def test_sentences_index_the_text_exactly() -> None:
    text = "Intro line\n\nFirst one. Second one? 3 is a number!\nsame sentence.  "
    got = text_units.sentences(text, 0, len(text))
    assert [u.text for u in got] == [
        "Intro line",
        "First one.",
        "Second one?",
        "3 is a number!\nsame sentence.",
    ]
    assert all(text[u.start : u.end] == u.text for u in got)


def test_no_overlap_means_no_evidence() -> None:
    sel = evidence.select("What is the capital of Australia?", [PDB])
    assert sel.best_score == 0.0


def upsert(c: Collection, docs: dict[str, str], embedder: HashEmbedder) -> None:
    ids = list(docs)
    c.upsert(
        ids,
        embedder.embed([docs[i] for i in ids]),
        [docs[i] for i in ids],
        [None] * len(ids),
        mode="text",
        embedding_model=embedder.model_id,
    )


def test_the_text_index_follows_replacements_and_deletes(tmp_path: Path) -> None:
    embedder = HashEmbedder(dim=64)
    c = Collection(tmp_path / "c")
    upsert(c, {"a": "The ferry leaves at dawn.", "b": "Trains run hourly."}, embedder)
    assert [i for i, _ in c.lexical_search(["ferry"], 5)] == ["a"]
    upsert(c, {"a": "The bus leaves at noon."}, embedder)
    assert c.lexical_search(["ferry"], 5) == []
    assert [i for i, _ in c.lexical_search(["bus"], 5)] == ["a"]
    c.delete(["a"])
    assert c.lexical_search(["bus"], 5) == []
    assert [i for i, _ in c.lexical_search(["trains"], 5)] == ["b"]  # porter: trains ~ train


def test_collections_written_before_the_text_index_get_it_on_open(tmp_path: Path) -> None:
    import sqlite3

    embedder = HashEmbedder(dim=64)
    c = Collection(tmp_path / "c")
    upsert(c, {"a": "The ferry leaves at dawn."}, embedder)
    c.close()
    db = sqlite3.connect(tmp_path / "c" / "rows.sqlite")
    db.execute("DELETE FROM items_fts")
    db.execute("DELETE FROM fts_rows")
    db.commit()
    db.execute("PRAGMA user_version = 0")  # a file written before numbered migrations
    db.close()
    reopened = Collection(tmp_path / "c")
    assert [i for i, _ in reopened.lexical_search(["ferry"], 5)] == ["a"]


def test_hybrid_retrieval_finds_an_exact_term_the_embedding_ranks_low(tmp_path: Path) -> None:
    embedder = HashEmbedder(dim=64)
    c = Collection(tmp_path / "c")
    filler = {f"f{i}": f"Breakpoints and frames and stepping, note {i}." for i in range(40)}
    upsert(c, {**filler, "target": "tbreak sets a temporary breakpoint."}, embedder)
    q = "tbreak"
    vector = embedder.embed(["breakpoints frames stepping"])[0]  # an embedding that misses it
    dense_only = [h.id for h in c.search(vector, 5)]
    assert "target" not in dense_only
    found = retrieval.hybrid(c, vector, q, 5)
    assert "target" in [h.id for h in found]
    target = next(h for h in found if h.id == "target")
    assert target.text == "tbreak sets a temporary breakpoint."
    assert -1.0 <= target.score <= 1.0


class _Ranked:
    """A retriever with a fixed ranking that records how deep it was asked."""

    def __init__(self, texts: list[str]) -> None:
        self.hits = [Hit(str(i), 0.9 - i / 100, t, None) for i, t in enumerate(texts)]
        self.asked: list[int] = []

    def passages(self, question: str, k: int) -> list[Hit]:
        self.asked.append(k)
        return self.hits[:k]

    def closeness(self, question: str, texts: Sequence[str]) -> list[float] | None:
        return None


def test_candidates_widen_the_evidence_ranking_but_top_k_passages_reach_the_prompt() -> None:
    texts = [f"Unrelated note {i} about the canteen menu." for i in range(7)]
    texts.append("The pdb command tbreak sets a temporary breakpoint.")
    llm = LLM(ScriptedBackend("tbreak"), max_waiters=1, timeout=5)
    question = Question(query="Which pdb command sets a temporary breakpoint?", top_k=1)

    default = _Ranked(texts)
    shown = ground(llm, default, question, AnswerConfig())
    assert default.asked == [1] and [s.id for s in shown.sources] == ["0"]  # the top 1 only

    wide = _Ranked(texts)
    grounding = ground(llm, wide, question, AnswerConfig(candidates=10))
    assert wide.asked == [10]
    assert [s.id for s in grounding.sources] == ["7"]  # the 8th passage, the only one shown
    assert grounding.prompt is not None
    prompt = grounding.prompt.messages[-1]["content"]
    assert "tbreak" in prompt and "canteen" not in prompt


def test_a_looping_tail_is_told_from_text_that_merely_repeats_a_little() -> None:
    for looping in ("1" + "0" * 24, "It is " + "ab" * 12, "x " + "no no " * 8, "a" * 100):
        assert repeating_tail(looping), looping
    for fine in (
        "Deploys are frozen on Fridays.",
        "\"42\".zfill(5) returns '00042'",
        "1" + "0" * 23,
        "ab" * 11,
        "wait" + " " * 40,
        "It costs 1,000,000,000,000 dollars.",
    ):
        assert not repeating_tail(fine), fine
