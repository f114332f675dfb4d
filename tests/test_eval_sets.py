"""Evaluation sets: the project's own hold what the evaluation promises, and a
set kept anywhere else loads, is checked with clear errors, and is cut into
passages the way an upload script would cut it. No models."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from benches.quality import eval_sets
from benches.quality.rag_eval import collection_name, set_specs


def write_set(directory: Path, documents: Any, questions: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "documents.json").write_text(json.dumps(documents))
    (directory / "questions.json").write_text(json.dumps(questions))
    return directory


@pytest.mark.parametrize("name", eval_sets.SETS)
def test_each_project_set_loads_with_enough_questions_in_both_splits(name: str) -> None:
    evset = eval_sets.load(name)
    answerable = [q for q in evset.questions if q["expect"] is not None]
    unanswerable = [q for q in evset.questions if q["expect"] is None]
    assert len(answerable) >= 40 and len(unanswerable) >= 15
    assert {q["split"] for q in answerable} == {q["split"] for q in unanswerable} == {"dev", "test"}
    # passages as uploaded: every document already fits, so none is cut
    assert evset.passages() == evset.documents


def test_a_set_outside_the_repository_runs_by_its_path(tmp_path: Path) -> None:
    long_text = "\n\n".join(
        f"Section {i}. The pump in hall {i} is serviced every {i + 2} weeks by the day shift."
        for i in range(40)
    )
    directory = write_set(
        tmp_path / "Held Out",
        {
            "documents": [
                {"id": "short", "text": "The kiosk's manager is Dana Ortiz."},
                {"id": "manual", "text": long_text, "metadata": {"source": "manual"}},
            ]
        },
        {
            "questions": [
                {"q": "Who manages the kiosk?", "expect": ["Dana Ortiz"]},
                {"q": "Who painted the kiosk?", "expect": None, "split": "dev"},
            ]
        },
    )
    evset = eval_sets.load(str(directory))
    assert evset.name == "Held Out"
    assert [q["split"] for q in evset.questions] == ["test", "dev"]  # no split: held out
    items = evset.passages()
    assert items[0] == {"id": "short", "text": "The kiosk's manager is Dana Ortiz."}
    pieces = items[1:]
    assert len(pieces) > 1
    assert [p["id"] for p in pieces] == [f"manual#chunk-{n}" for n in range(len(pieces))]
    assert all(len(p["text"]) <= eval_sets.MAX_CHARS for p in pieces)
    assert all(p["metadata"] == {"source": "manual"} for p in pieces)
    # nothing lost or reordered: the pieces hold the document's words in order
    assert re.findall(r"\S+", " ".join(p["text"] for p in pieces)) == re.findall(r"\S+", long_text)
    assert collection_name(evset.name) == "held-out"


def test_a_long_line_is_cut_at_sentence_ends() -> None:
    line = " ".join(f"Sentence {i} holds the value {i * 7}." for i in range(60))
    cut = eval_sets.upload_pieces(line)
    assert len(cut) > 1 and all(len(p) <= eval_sets.MAX_CHARS for p in cut)
    assert all(p.endswith(".") for p in cut)
    assert " ".join(cut) == line


def test_option_table_lines_are_kept(tmp_path: Path) -> None:
    table = "\n".join(f"  -{chr(97 + i % 26)}{i}, --option-{i}   does thing {i}" for i in range(40))
    cut = eval_sets.upload_pieces(table)
    assert len(cut) > 1
    assert "\n".join(cut).splitlines() == table.splitlines()


@pytest.mark.parametrize(
    ("documents", "questions", "message"),
    [
        ({"documents": []}, {"questions": [{"q": "x", "expect": None}]}, "documents"),
        (
            {"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]},
            {"questions": [{"q": "x", "expect": None}]},
            "'a' appears twice",
        ),
        ({"documents": [{"id": "a", "text": "x"}]}, {"questions": [{"q": "x"}]}, "expect"),
        (
            {"documents": [{"id": "a", "text": "x"}]},
            {"questions": [{"q": "x", "expect": []}]},
            "expect",
        ),
        (
            {"documents": [{"id": "a", "text": "x"}]},
            {"questions": [{"q": "x", "expect": [" "]}]},
            "blank",
        ),
        (
            {"documents": [{"id": "a", "text": "x"}]},
            {"questions": [{"q": "x", "expect": None, "split": "later"}]},
            "split",
        ),
        (
            {"documents": [{"id": "a", "text": "x"}]},
            {"questions": [{"q": "x", "expect": ["y"], "source": "b"}]},
            "source 'b' is not a document id",
        ),
        (
            {"documents": [{"id": "a", "text": "x"}]},
            {"paraphrased": True, "questions": [{"q": "x", "expect": ["y"]}]},
            "names the source of every answerable one",
        ),
    ],
)
def test_a_malformed_set_is_refused_with_the_file_and_the_field(
    tmp_path: Path, documents: Any, questions: Any, message: str
) -> None:
    directory = write_set(tmp_path / "bad", documents, questions)
    with pytest.raises(eval_sets.SetError, match=re.escape(message)) as caught:
        eval_sets.load(str(directory))
    assert str(directory) in str(caught.value)


def test_missing_files_and_unknown_names_say_what_is_expected(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(eval_sets.SetError, match=r"documents\.json.*missing"):
        eval_sets.load(str(tmp_path / "empty"))
    with pytest.raises(eval_sets.SetError, match=r"no such set.*gnu-help"):
        eval_sets.load("no-such-set")
    broken = write_set(tmp_path / "broken", {"documents": [{"id": "a", "text": "x"}]}, {})
    (broken / "questions.json").write_text("{not json")
    with pytest.raises(eval_sets.SetError, match="not JSON"):
        eval_sets.load(str(broken))


def test_a_dev_run_leaves_out_the_held_out_sets_unless_they_are_named() -> None:
    assert "licenses" in eval_sets.HELD_OUT and "licenses" not in eval_sets.TUNED
    assert set_specs(None, "dev") == eval_sets.TUNED
    assert set_specs(None, "test") == set_specs(None, "all") == eval_sets.SETS
    assert set_specs(["licenses"], "dev") == ["licenses"]


PARAPHRASED = [name for name in eval_sets.SETS if eval_sets.load(name).paraphrased]


def test_two_project_sets_are_asked_in_the_askers_own_words() -> None:
    assert len(PARAPHRASED) >= 2


@pytest.mark.parametrize("name", PARAPHRASED)
def test_each_question_shares_at_most_one_content_word_with_its_source(name: str) -> None:
    evset = eval_sets.load(name)
    assert all(q["source"] for q in evset.questions if q["expect"] is not None)
    assert eval_sets.reworded(evset) == []


def test_shared_words_leave_names_numbers_and_function_words_aside() -> None:
    document = "The Brindlewood Library is open until 20:00 on Thursdays. Books are lent for weeks."
    # "Brindlewood", "Thursday" are names, 20 a number, "is", "the" function words
    assert eval_sets.shared_words("Is Brindlewood open at 20:00 on Thursday?", document) == {"open"}
    # stems meet: "books" / "book", "lending" / "lent" do not
    assert eval_sets.shared_words("How long is a book lent for?", document) == {"book", "lent"}
    # a capital at a sentence start is not a name ("Books" is the word "books")
    assert eval_sets.shared_words("Which books?", document) == {"book"}


def test_a_question_reusing_its_sources_words_is_reported(tmp_path: Path) -> None:
    directory = write_set(
        tmp_path / "reuse",
        {"documents": [{"id": "wifi", "text": "The office guest Wi-Fi network is Calder-Guest."}]},
        {
            "paraphrased": True,
            "questions": [
                {"q": "What is the office guest network?", "expect": ["x"], "source": "wifi"},
                {"q": "What's the visitor wireless called?", "expect": ["x"], "source": "wifi"},
            ],
        },
    )
    reported = eval_sets.reworded(eval_sets.load(str(directory)))
    assert reported == [("What is the office guest network?", {"offic", "guest", "network"})]
