"""Answer-quality evaluation on every document set, with the real default models.

    .venv/bin/python benches/quality/rag_eval.py                 # all sets, both splits
    .venv/bin/python benches/quality/rag_eval.py --split dev   # what tuning may see

    .venv/bin/python benches/quality/rag_eval.py --sets /path/to/held-out-set

Sets (benches/quality/eval/<set>/documents.json + questions.json, see build_sets.py
and benches/quality/eval_sets.py for the format): `own` (written by the team),
`python-reference` (pdb and str methods from the interpreter's help text),
`maketext-article` (a Perl Journal article), `gnu-help` (`--help` of ls,
sort, grep) and `licenses` (GPL 3 and Apache 2.0); any other directory
holding the two files runs by its path.
Each question carries its split; tune on dev, report test.

For each set: a fresh store through the HTTP app, every passage uploaded as a
user would, every question asked through /answer/stream with default
settings, (surface `lucidworks`) through /ai/prediction/rag, sent with the
passages the pipeline's retrieval picks for it as the request's documents
(answerFound must be true with the fact in the answer; an unanswerable
question must get answerFound false; on every surface an answer that says
in words that the documents do not answer counts as a refusal), and (surface `engine`) through
`:answer` over the same passages uploaded as files, where the citations are
also scored: the share of answers with a valid marker, and the share whose
cited spans (read back with `:readSpans`) hold the expected fact. Reported
per surface, set and split, and over all sets:
- accuracy: an accepted spelling of the expected fact appears in the answer
  (as a whole token) and the answer is not a refusal;
- correct refusals on unanswerable questions, and how many of those were
  exactly the fixed no-information sentence;
- recall@k: an accepted spelling appears in one of the passages retrieved
  for the prompt (separates retrieval losses from generation losses);
- time to first token and total time (medians).
Settings come from EDGERAG_* variables as for the server. `--unverified`:
no verifier and no refusal gate (the model's first answer as it writes it).
`--header-prompt` / `--footer-prompt`: every /answer request carries a
client's own prompts (moorcheh's `header_prompt` replaces the default system
prompt); the settings block records them.
Results: benches/results/rag_eval.json (or --json).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import re
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benches.quality import eval_sets, squad
from benches.quality.eval_sets import EvalSet
from flask_app import rag
from flask_app.api.engine.answer import NOT_FOUND_ANSWER as ENGINE_NOT_FOUND
from flask_app.app import create_app
from flask_app.inference.llm import Sampling
from flask_app.inference.presets import PRESETS
from flask_app.rag.answer import AnswerConfig, Grounding, ground
from flask_app.rag.prompts import NO_CONTEXT_ANSWER
from flask_app.rag.retrieval import StoredCollection
from flask_app.rag.verifier import Gate, choose_gate
from flask_app.services import Services, load_services
from flask_app.settings import Settings

# A refusal says the documents lack the answer; an answer may say "not" too
# ("Chinese doesn't have number", "towels are not provided"), so a negation
# counts only with what is missing (information, the answer) or where (the
# documents, the text) beside it.
_NOT = r"(?:do not|don't|does not|doesn't|cannot|can't|could not|couldn't)"
_SOURCE = r"(?:documents?|text|context|passages?|sources?)"
REFUSAL = re.compile(
    rf"{_NOT} answer"
    rf"|{_NOT} (?:have|provide|contain|find|give|include)"
    r"(?: \w+){0,3} (?:information|answer|details)"
    r"|not enough information|no information|i don't know"
    r"|not (?:mentioned|provided|specified|stated|given|available|included|listed)"
    rf"(?: \w+){{0,4}} {_SOURCE}"
    rf"|{_SOURCE} {_NOT} (?:say|mention|specify|state|contain|include|provide)",
    re.IGNORECASE,
)


def parse_sse(chunks: Any) -> Iterator[tuple[str, Any]]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while b"\n\n" in buffer:
            raw, buffer = buffer.split(b"\n\n", 1)
            lines = raw.decode().split("\n")
            event = next(line[7:] for line in lines if line.startswith("event: "))
            data = json.loads("\n".join(line[6:] for line in lines if line.startswith("data: ")))
            yield event, data


def normalise(text: str, *, keep_case: bool = False) -> str:
    text = text.replace("\u2019", "'").replace("`", "")
    return text if keep_case else text.lower()


def mentions(text: str, spellings: list[str]) -> bool:
    """Some spelling appears in `text` as a whole token (so "ll" is not found in
    "all"), ignoring case, except for command-line options (spellings starting
    with "-": `-v` is not `-V`)."""
    exact = normalise(text, keep_case=True)
    lowered = exact.lower()
    # a plural or third-person ending still counts ("monday" in "Mondays")
    pattern = r"(?<![A-Za-z0-9]){}(?:s|es)?(?![A-Za-z0-9])"
    return any(
        re.search(pattern.format(re.escape(normalise(s, keep_case=True))), exact)
        if s.startswith("-")
        else re.search(pattern.format(re.escape(normalise(s))), lowered)
        for s in spellings
    )


def is_refusal(answer: str) -> bool:
    return bool(REFUSAL.search(answer.replace("\u2019", "'")))


def ask(client: Any, question: str, prompts: dict[str, str] | None = None) -> dict[str, Any]:
    """`question` through /answer/stream, with a client's `header_prompt` and
    `footer_prompt` when `prompts` has them."""
    start = time.perf_counter()
    body = {"query": question, **(prompts or {})}
    response = client.post("/answer/stream", json=body, buffered=False)
    first = None
    answer, sources, done = "", [], {}
    for event, data in parse_sse(response.response):
        if event == "meta":
            sources = [s["text"] for s in data["sources"]]
        elif event == "token" and first is None:
            first = time.perf_counter()
        elif event == "done":
            answer, done = data["answer"], data
        elif event == "error":
            raise SystemExit(f"error event: {data}")
    end = time.perf_counter()
    return {
        "answer": answer,
        "sources": sources,
        "evidence_score": done.get("evidence_score"),
        "refusal_probability": done.get("refusal_probability"),
        "answerable_probability": done.get("answerable_probability"),
        "prompt_tokens": done.get("usage", {}).get("prompt_tokens"),
        "ttft_s": round((first or end) - start, 3),
        "total_s": round(end - start, 3),
    }


def ask_lucidworks(
    client: Any, collection: Any, embedder: Any, question: str, extract: bool
) -> dict[str, Any]:
    from flask_app.rag.retrieval import StoredCollection

    start = time.perf_counter()
    vector = embedder.embed([question])[0]
    hits = StoredCollection(collection, vector).passages(question, 5)
    body = {
        "batch": [
            {"text": question, "documents": [{"body": h.text, "source": h.id} for h in hits]}
        ],
        "useCaseConfig": {} if extract else {"extractRelevantContent": False},
    }
    r = client.post("/ai/prediction/rag/llama-3-8b-instruct", json=body)
    assert r.status_code == 200, r.get_json()
    p = r.get_json()["predictions"][0]
    end = time.perf_counter()
    return {
        "answer": p["answer"] if p["answerFound"] else NO_CONTEXT_ANSWER,
        "found": p["answerFound"],
        "sources": [h.text for h in hits],
        "evidence_score": None,
        "refusal_probability": None,
        "ttft_s": round(end - start, 3),
        "total_s": round(end - start, 3),
    }


MARKER = re.compile(r"\[\[SRC:\d{4}\]\]")


def ask_engine(client: Any, collection: str, question: str) -> dict[str, Any]:
    """Through `:answer` (sources "all"); the cited spans read back with `:readSpans`."""
    start = time.perf_counter()
    r = client.post(f"/namespaces/eval/collections/{collection}:answer", json={"query": question})
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    end = time.perf_counter()
    cited = [s["span"] for s in body["sources"] if s["cited"]]
    spans = []
    if cited:
        read = client.post(
            f"/namespaces/eval/collections/{collection}:readSpans", json={"spans": cited}
        )
        spans = [s["text"] for s in read.get_json()["spans"]]
    return {
        "answer": MARKER.sub("", body["answer"]).strip(),
        "found": body["answer"] != ENGINE_NOT_FOUND,
        "markers": len(MARKER.findall(body["answer"])),
        "cited_spans": spans,
        "sources": spans,
        "evidence_score": None,
        "refusal_probability": None,
        "answerable_probability": body.get("answerable_probability"),
        "ttft_s": round(end - start, 3),
        "total_s": round(end - start, 3),
    }


def upload_items(client: Any, items: list[dict[str, Any]]) -> None:
    """`items` into the moorcheh store as text, 64 to a request."""
    for lo in range(0, len(items), 64):
        r = client.post("/upload", json={"store_mode": "text", "items": items[lo : lo + 64]})
        assert r.status_code == 200, r.get_json()


def upload_engine(client: Any, app: Any, collection: str, documents: list[dict[str, Any]]) -> None:
    from flask import current_app

    from flask_app.api.http.extensions import collections_of

    client.put("/namespaces/eval")
    client.put(f"/namespaces/eval/collections/{collection}")
    for doc in documents:
        body = {"path": f"{doc['id']}.txt", "content_type": "text/plain", "text": doc["text"]}
        r = client.post(f"/namespaces/eval/collections/{collection}/files", json=body)
        assert r.status_code == 202, r.get_json()
    with app.app_context():
        assert collections_of(current_app).ingestor.wait_idle(600)


def wilson(hits: int, n: int, z: float = 1.96) -> list[float] | None:
    """95% Wilson score interval of a rate of `hits` in `n` (None for n = 0):
    with 7-9 unanswerable questions per test split, one question is 11-14 points."""
    if n == 0:
        return None
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in rows if r["expected"] is not None]
    unanswerable = [r for r in rows if r["expected"] is None]

    def rate(part: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(bool(r[key]) for r in part) / len(part), 3) if part else None

    def interval(part: list[dict[str, Any]], key: str) -> list[float] | None:
        return wilson(sum(bool(r[key]) for r in part), len(part))

    answered = [r for r in rows if r.get("citations") is not None and r["found"]]
    citing = {}
    if answered:
        citing = {
            "answers_with_a_valid_citation": rate(answered, "citations"),
            "answers_whose_cited_span_holds_the_fact": rate(
                [r for r in answered if r["expected"] is not None], "span_holds_fact"
            ),
        }
    for r in answerable:
        r.setdefault("wrong", bool(r.get("found", True)) and not r["correct"])
    squad = [r for r in answerable if "squad_f1" in r]
    metrics = {}
    if squad:
        metrics = {
            "squad_exact_match": round(statistics.mean(r["squad_em"] for r in squad), 3),
            "squad_f1": round(statistics.mean(r["squad_f1"] for r in squad), 3),
        }
    return {
        **citing,
        **metrics,
        "answerable": len(answerable),
        "accuracy": rate(answerable, "correct"),
        "wrong": rate(answerable, "wrong"),
        "accuracy_95ci": interval(answerable, "correct"),
        "recall_at_k": rate(answerable, "recalled"),
        "unanswerable": len(unanswerable),
        "correct_refusals": rate(unanswerable, "correct"),
        "correct_refusals_95ci": interval(unanswerable, "correct"),
        "fixed_sentence_refusals": rate(unanswerable, "fixed_sentence"),
        "ttft_median_s": round(statistics.median(r["ttft_s"] for r in rows), 3) if rows else None,
        "total_median_s": round(statistics.median(r["total_s"] for r in rows), 3) if rows else None,
    }


def set_specs(given: list[str] | None, split: str) -> list[str]:
    """The sets to run: those given, else all of them, except that a dev run
    leaves out the held-out sets (tuning never looks at them)."""
    if given:
        return given
    return eval_sets.TUNED if split == "dev" else eval_sets.SETS


def collection_name(set_name: str) -> str:
    """The Engine collection a set's files go to (names are [a-z0-9-], at most 63)."""
    return (re.sub(r"[^a-z0-9-]+", "-", set_name.lower()).strip("-") or "set")[:63]


# the moorcheh /answer defaults a plain request gets
TOP_K = 5
TEMPERATURE = 0.2


def grounded(
    services: Services, config: AnswerConfig, query: str
) -> tuple[rag.Question, Grounding]:
    """One question grounded in the moorcheh store as the moorcheh route grounds it."""
    assert services.llm is not None and services.embedder is not None
    collection = services.store.edge()
    question = rag.Question(query=query, top_k=TOP_K, sampling=Sampling(temperature=TEMPERATURE))
    vector = rag.query_vector(collection, question, services.embedder)
    retriever = StoredCollection(collection, vector, None, embedder=services.embedder)
    grounding = ground(services.llm, retriever, question, config)
    assert grounding.prompt is not None, "a store with passages always grounds"
    return question, grounding


# --unverified: the model's first answer as it writes it, nothing declined for it
UNVERIFIED = {"answer_refusal_probability": "off", "answer_probe": "off"}


def opened(gate: Gate) -> Gate:
    """The same verifier at threshold 0: each answer carries the probability
    it would be judged by, so one run gives every threshold's right / wrong /
    declined (benches/quality/frontier.py); the choice among candidates does
    not depend on the threshold. The file's answerability floor stays: what
    it declines is declined at every threshold, as served."""
    if gate.verifier is None:
        raise SystemExit(f"--open-gate needs a verifier: {gate.reason}")
    return Gate(gate.verifier, threshold=0.0)


def run_set(
    evset: EvalSet,
    llm: str,
    overrides: dict[str, Any],
    splits: set[str],
    limit: int | None,
    quiet: bool,
    surfaces: list[str],
    extract: bool,
    prompts: dict[str, str] | None = None,
    family: str = "sets",
    open_gate: bool = False,
) -> list[dict[str, Any]]:
    """Each question of `splits` asked on each surface (`family`: "squad"
    rows also carry SQuAD's exact match and F1 against the gold answers;
    `open_gate`: the verifier declines nothing, see `opened`)."""
    name = evset.name
    items = evset.passages()
    questions = [q for q in evset.questions if q["split"] in splits][:limit]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "llm": llm, **overrides}, os.environ)
        services = load_services(settings)
        if open_gate:
            services = dataclasses.replace(services, gate=opened(services.gate))
        app = create_app(settings, services)
        client = app.test_client()
        upload_items(client, items)
        collection = services.store.edge()
        if "engine" in surfaces:  # files are uploaded whole: the server chunks them
            upload_engine(client, app, collection_name(name), evset.documents)
        for item, surface in [(q, s) for q in questions for s in surfaces]:
            if surface == "answer":
                got = ask(client, item["q"], prompts)
                refused = is_refusal(got["answer"])
            elif surface == "lucidworks":
                got = ask_lucidworks(client, collection, services.embedder, item["q"], extract)
                refused = not got["found"] or is_refusal(got["answer"])
            else:
                got = ask_engine(client, collection_name(name), item["q"])
                refused = not got["found"] or is_refusal(got["answer"])
            expected = item["expect"]
            if expected is None:
                correct = refused
                recalled = None
            else:
                correct = mentions(got["answer"], expected) and not refused
                recalled = any(mentions(s, expected) for s in got["sources"])
            row = {
                "llm": llm,
                "surface": surface,
                "set": name,
                "split": item["split"],
                "question": item["q"],
                "expected": expected,
                "answer": got["answer"],
                "correct": correct,
                "recalled": recalled,
                "fixed_sentence": got["answer"].strip() == NO_CONTEXT_ANSWER,
                "evidence_score": got["evidence_score"],
                "refusal_probability": got["refusal_probability"],
                "answerable_probability": got.get("answerable_probability"),
                "prompt_tokens": got.get("prompt_tokens"),
                "ttft_s": got["ttft_s"],
                "total_s": got["total_s"],
                "found": not refused,
                "family": family,
            }
            if family == "squad" and expected is not None:
                em, f1 = squad.squad_scores("" if refused else got["answer"], expected)
                row["squad_em"], row["squad_f1"] = em, round(f1, 4)
            if surface == "engine":
                row["citations"] = got["markers"] > 0
                row["span_holds_fact"] = expected is not None and any(
                    mentions(s, expected) for s in got["cited_spans"]
                )
            rows.append(row)
            if not quiet or not correct:
                mark = "ok " if correct else "BAD"
                where = f"{llm} {surface}:{name}/{item['split']}"
                print(f"[{where}] {mark} {item['q']}\n      -> {got['answer']}")
        services.store.close()
    return rows


def tabulate(
    rows: list[dict[str, Any]], sets: list[str], surfaces: list[str], splits: set[str]
) -> dict[str, Any]:
    """Scores per model, then per surface, set (and overall) and split."""
    tables: dict[str, Any] = {}
    for llm in dict.fromkeys(r["llm"] for r in rows):
        table: dict[str, Any] = {}
        families = sorted({r.get("family", "sets") for r in rows})
        groups = [*sets, *(f"{family}-overall" for family in families), "overall"]
        for surface in surfaces:
            for name in groups:
                for split in sorted(splits):
                    part = [
                        r
                        for r in rows
                        if r["llm"] == llm
                        and r["surface"] == surface
                        and (
                            name == "overall"
                            or r["set"] == name
                            or name == f"{r.get('family', 'sets')}-overall"
                        )
                        and r["split"] == split
                    ]
                    key = f"{name}/{split}" if surface == "answer" else f"{surface}:{name}/{split}"
                    table[key] = score(part)
        tables[llm] = {k: v for k, v in table.items() if v["answerable"] or v["unanswerable"]}
    return tables


def side_by_side(
    tables: dict[str, Any], surface: str = "answer", skip: frozenset[str] = frozenset()
) -> str:
    """A Markdown table of one surface: a row per set (but those in `skip`:
    SQuAD's articles, shown by their family's overall) and split, the models
    side by side."""
    llms = list(tables)
    prefix = "" if surface == "answer" else f"{surface}:"
    keys = [
        k[len(prefix) :]
        for k in tables[llms[0]]
        if k.startswith(prefix)
        and ":" not in k[len(prefix) :]
        and k[len(prefix) :].rsplit("/", 1)[0] not in skip
    ]

    def pct(value: float | None) -> str:
        return "–" if value is None else f"{value:.0%}"

    def secs(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f} s"

    head = "| set/split | " + " | ".join(
        f"{llm}: right | wrong | declined | recall@k | TTFT | total" for llm in llms
    )
    lines = [head + " |", "|---|" + "---|" * (6 * len(llms))]
    for key in keys:
        cells = []
        for llm in llms:
            r = tables[llm][prefix + key]
            cells += [
                pct(r["accuracy"]),
                pct(r.get("wrong")),
                pct(r["correct_refusals"]),
                pct(r["recall_at_k"]),
                secs(r["ttft_median_s"]),
                secs(r["total_median_s"]),
            ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sets",
        nargs="+",
        metavar="SET",
        help=f"set names under benches/eval ({', '.join(eval_sets.SETS)}) or set directories "
        f"(default: all; with --split dev, those tuning may look at: {', '.join(eval_sets.TUNED)})",
    )
    parser.add_argument("--split", choices=["dev", "test", "all"], default="all")
    parser.add_argument(
        "--squad",
        action="store_true",
        help="also SQuAD's articles of --split (dev or test; benches/quality/squad.py build)",
    )
    parser.add_argument(
        "--squad-only", action="store_true", help="SQuAD's articles of --split, no other set"
    )
    parser.add_argument(
        "--llms",
        nargs="+",
        choices=list(PRESETS),
        default=list(PRESETS),
        help="the chat models to evaluate, side by side (default: every preset)",
    )
    parser.add_argument("--limit", type=int, help="at most this many questions per set")
    parser.add_argument("--json", type=Path, default=Path("benches/results/rag_eval.json"))
    parser.add_argument("--quiet", action="store_true", help="print only wrong answers")
    parser.add_argument(
        "--surfaces",
        nargs="+",
        default=["answer", "lucidworks", "engine"],
        choices=["answer", "lucidworks", "engine"],
    )
    parser.add_argument(
        "--whole-documents",
        action="store_true",
        help="lucidworks requests send extractRelevantContent: false (default: not sent)",
    )
    parser.add_argument(
        "--header-prompt",
        help="every /answer request sends this header_prompt (replaces the system prompt)",
    )
    parser.add_argument("--footer-prompt", help="every /answer request sends this footer_prompt")
    parser.add_argument(
        "--unverified",
        action="store_true",
        help="no verifier and no refusal gate: the model's first answer as it writes it",
    )
    parser.add_argument(
        "--open-gate",
        action="store_true",
        help="the verifier declines nothing and every answer records its probability "
        "(benches/quality/frontier.py reads the run at every threshold)",
    )
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="recompute the tables of --json from the answers it holds (no model run)",
    )
    args = parser.parse_args()
    if args.rescore:
        report = json.loads(args.json.read_text())
        rows = report["answers"]
        sets, surfaces = ([*dict.fromkeys(r[key] for r in rows)] for key in ("set", "surface"))
        report["results"] = tabulate(rows, sets, surfaces, {r["split"] for r in rows})
        hidden = frozenset(r["set"] for r in rows if r.get("family") == "squad")
        print(side_by_side(report["results"], skip=hidden))
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        return
    splits = {"dev", "test"} if args.split == "all" else {args.split}
    specs = [] if args.squad_only else set_specs(args.sets, args.split)
    articles: list[str] = []
    if args.squad or args.squad_only:
        if args.split == "all":
            parser.error("--squad needs --split dev or --split test")
        articles = [str(p) for p in squad.set_dirs(squad.default_dir(), args.split)]
        specs += articles
    try:
        chosen = [eval_sets.load(spec) for spec in specs]
    except eval_sets.SetError as exc:
        parser.error(str(exc))
    names = [s.name for s in chosen]
    # SQuAD's articles, by --squad or given by their directories, are their own family
    built = squad.sets_dir(squad.default_dir()).resolve()
    squad_names = frozenset(
        s.name
        for spec, s in zip(specs, chosen, strict=True)
        if spec in articles or built in Path(spec).resolve().parents
    )
    if len(set(names)) < len(names):
        parser.error(f"two sets share a name: {', '.join(names)}")
    for evset in chosen:
        if evset.paraphrased:
            answerable = sum(q["expect"] is not None for q in evset.questions)
            reused = eval_sets.reworded(evset)
            print(
                f"{evset.name}: {len(reused)} of {answerable} answerable questions share more "
                f"than {eval_sets.MAX_SHARED_WORDS} content word with their source"
                + "".join(f"\n  {q} {sorted(w)}" for q, w in reused)
            )
    if args.unverified and args.open_gate:
        parser.error("--open-gate reads the verifier that --unverified turns off")
    overrides: dict[str, Any] = UNVERIFIED if args.unverified else {}
    for llm in args.llms:
        path = Settings.load({"llm": llm, **overrides}, os.environ).llm_path()
        if not path.is_file():
            parser.error(f"{llm} is not pulled ({path}): run `edgerag pull --llm {llm}`")
    # the settings the run starts with (a verifier refitted while it runs is not its)
    models = {}
    for llm in args.llms:
        settings = Settings.load({"llm": llm, **overrides}, os.environ)
        gate = choose_gate(
            llm, settings.llm_path(), settings.verifier_threshold(), off=settings.verifier_off()
        )
        verifier = gate.verifier
        models[llm] = {
            **dataclasses.asdict(settings.calibration()),
            # the verifier's threshold as served (None: answers went out unverified)
            "verifier_threshold": gate.threshold if verifier is not None else None,
            "verifier_file_sha256": None
            if verifier is None or verifier.path is None
            else hashlib.sha256(verifier.path.read_bytes()).hexdigest(),
            "samples": None if verifier is None else verifier.samples,
            "answer_min_score": settings.answer_min_score,
            "context_tokens": settings.context_tokens,
            "quant": settings.quant,
            "header_prompt": args.header_prompt,
            "footer_prompt": args.footer_prompt,
            "open_gate": args.open_gate,
            "skip_below": None if verifier is None else verifier.skip_below,
        }
    given = {"header_prompt": args.header_prompt, "footer_prompt": args.footer_prompt}
    client_prompts = {key: text for key, text in given.items() if text}
    rows = []
    for llm in args.llms:
        for evset in chosen:
            family = "squad" if evset.name in squad_names else "sets"
            rows += run_set(
                evset,
                llm,
                overrides,
                splits,
                args.limit,
                args.quiet,
                args.surfaces,
                not args.whole_documents,
                prompts=client_prompts,
                family=family,
                open_gate=args.open_gate,
            )
    tables = tabulate(rows, names, args.surfaces, splits)
    report = {"settings": models, "results": tables, "answers": rows}
    for surface in args.surfaces:
        print(f"\n{surface}\n" + side_by_side(tables, surface, squad_names))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
