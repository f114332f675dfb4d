"""The evaluation's scoring, without models: whole-token fact matching and
the 95% intervals reported next to every rate."""

from __future__ import annotations

from typing import Any

from benches.quality.rag_eval import is_refusal, mentions, score, wilson


def test_a_fact_counts_only_as_a_whole_token() -> None:
    assert mentions("The museum is closed on Mondays.", ["monday"])
    assert not mentions("Call them all.", ["ll"])
    assert mentions("It uses `utf-8` by default", ["utf-8"])
    # command-line options keep their case: grep's -v is not its -V
    assert mentions("Use `-v`.", ["--invert-match", "-v"])
    assert not mentions("Use -V.", ["--invert-match", "-v"])
    assert not mentions("Use -vx.", ["-v"])
    # case is ignored on both sides: a set may spell the fact as the text does
    assert mentions("Dana Ortiz manages the kiosk.", ["Dana Ortiz"])
    assert mentions("DANA ORTIZ", ["dana ortiz"])


def test_wilson_intervals_match_the_textbook_values() -> None:
    assert wilson(2, 7) == [0.082, 0.641]  # 2 of 7 unanswerable questions refused
    assert wilson(0, 10) == [0.0, 0.278] and wilson(10, 10) == [0.722, 1.0]
    assert wilson(0, 0) is None


def test_score_reports_each_rate_with_its_interval() -> None:
    timing: dict[str, Any] = {"ttft_s": 1.0, "total_s": 1.0, "fixed_sentence": False}
    rows: list[dict[str, Any]] = [
        {"expected": ["x"], "correct": c, "recalled": True, **timing} for c in (1, 1, 0)
    ]
    rows.append({"expected": None, "correct": True, "recalled": None, **timing})
    got = score(rows)
    assert got["accuracy"] == 0.667 and got["accuracy_95ci"] == wilson(2, 3)
    assert got["correct_refusals"] == 1.0 and got["correct_refusals_95ci"] == wilson(1, 1)


def test_a_refusal_is_told_from_an_answer_that_says_not() -> None:
    refusals = [
        "I don't have enough information to answer that question.",
        "The price of the Falcon X4 drone is not provided in the given documents.",
        "The text does not contain the answer to the question.",
        "The head teacher at St Anne's is not mentioned in the provided documents.",
        "The documents don't mention the price.",
        "There is no information about opening hours.",
        "I don't know.",
    ]
    answers = [  # each answers its question (or is simply wrong), none refuses
        "Because Chinese doesn't have number as a grammatical category.",
        "No, you don't have to build your new cycle yourself when it comes.",
        "Towels are not provided; bring your own.",
        "Towels are not provided in the changing rooms.",
        "The gym does not provide towels.",
        "When the WHEN argument of ls is not specified, it defaults to using color.",
    ]
    assert [a for a in refusals if not is_refusal(a)] == []
    assert [a for a in answers if is_refusal(a)] == []


def test_a_clients_prompts_go_with_every_answer_request() -> None:
    """`--header-prompt` / `--footer-prompt`: /answer/stream is asked with
    them, beside the query, the way a moorcheh client sends its own."""
    from types import SimpleNamespace

    from benches.quality.rag_eval import ask

    sent: list[dict[str, Any]] = []

    class Client:
        def post(self, path: str, json: dict[str, Any], buffered: bool) -> SimpleNamespace:
            assert path == "/answer/stream"
            sent.append(json)
            done = b'event: done\ndata: {"answer": "Dana Ortiz."}\n\n'
            return SimpleNamespace(response=[b'event: token\ndata: {"text": "D"}\n\n', done])

    prompts = {"header_prompt": "You are a helpful assistant.", "footer_prompt": "Be brief."}
    assert ask(Client(), "Who runs the kiosk?", prompts)["answer"] == "Dana Ortiz."
    assert ask(Client(), "Who runs the kiosk?")["answer"] == "Dana Ortiz."
    assert sent == [{"query": "Who runs the kiosk?", **prompts}, {"query": "Who runs the kiosk?"}]
