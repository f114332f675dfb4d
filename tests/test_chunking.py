"""Upload chunking: exact spans, paragraphs merged up to the target, long
paragraphs cut where a reader would cut them."""

from __future__ import annotations

from flask_app.ingest.chunking import chunk

OPTION = "  -{0}, --option-{0}        does thing {0} to every file it is given;\n"
CONTINUED = "                             and more about {0} on its own line\n"


def test_a_long_option_table_is_cut_between_options() -> None:
    table = "Options:\n" + "".join(OPTION.format(c) + CONTINUED.format(c) for c in "abcdefghijkl")
    chunks = chunk(table, target=400)
    assert len(chunks) > 1 and all(table[c.start : c.end] == c.text for c in chunks)
    for c in chunks[1:]:
        assert c.text.startswith("-"), c.text[:40]  # each later chunk starts at an option
    for c in chunks:
        assert c.text.rstrip().endswith("own line"), c.text[-40:]  # never inside one


def test_prose_is_cut_at_sentence_ends_and_paragraphs_merge() -> None:
    prose = " ".join(f"Sentence number {i} says something short." for i in range(40))
    text = f"Title\n\n{prose}\n\nLast words."
    chunks = chunk(text, target=300)
    assert all(text[c.start : c.end] == c.text for c in chunks)
    assert all(len(c.text) <= 300 for c in chunks)
    assert all(c.text.endswith(".") for c in chunks)
    assert chunks[0].text.startswith("Title\n\nSentence number 0")
