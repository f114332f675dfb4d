"""Evaluation sets: where they live, what their files must hold, and how a
document becomes the passages a user's upload script would send.

A set is a directory with two files:

- `documents.json`: `{"documents": [{"id": "...", "text": "...", "metadata": {...}}]}`
  (metadata optional). A document longer than `MAX_CHARS` is cut the way an
  upload script would cut it (`upload_pieces`): blocks of lines merged while they
  fit, a longer block cut between lines, a longer line at sentence ends; the
  pieces are uploaded as `<id>#chunk-<n>`.
- `questions.json`: `{"questions": [{"q": "...", "expect": ["spelling", ...] | null,
  "split": "dev" | "test"}]}`. `expect` lists the accepted spellings of the
  fact (null: the documents do not give it, the answer must decline); a
  question without a split is a test question (a held-out set is never tuned on).

The project's sets are under `benches/quality/eval/<name>/`; any other directory
holding the two files is run by its path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from flask_app.rag.text import STOPWORDS, stem

EVAL = Path(__file__).parent / "eval"
# Sets whose dev split tuning may look at, and sets nothing is chosen on
# (written after the pipeline was settled): the full evaluation runs both.
TUNED = [
    "own",
    "python-reference",
    "maketext-article",
    "gnu-help",
    "town-notices",
    "product-help",
]
HELD_OUT = ["licenses"]
SETS = TUNED + HELD_OUT
# ~700 characters keeps even code-dense passages within the embedder's 512 tokens.
MAX_CHARS = 700


class SetError(ValueError):
    """A set that cannot be run, with the reason."""


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None


class _Documents(BaseModel):
    documents: list[_Document] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> _Documents:
        seen: set[str] = set()
        for doc in self.documents:
            if doc.id in seen:
                raise ValueError(f"document id {doc.id!r} appears twice")
            seen.add(doc.id)
        return self


class _Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    q: str = Field(min_length=1)
    expect: list[str] | None = Field(min_length=1)  # required: null means unanswerable
    split: Literal["train", "dev", "test"] = "test"
    source: str | None = None  # id of the document that answers it

    @model_validator(mode="after")
    def _spellings_not_blank(self) -> _Question:
        if self.expect is not None and not all(s.strip() for s in self.expect):
            raise ValueError("an accepted spelling is blank")
        return self


class _Questions(BaseModel):
    note: str | None = None
    # asked in the asker's own words: every answerable question names its
    # source, and `reworded` reports those sharing too many words with it
    paraphrased: bool = False
    questions: list[_Question] = Field(min_length=1)


@dataclass(frozen=True)
class EvalSet:
    name: str  # the directory's name: how reports and the Engine collection call it
    documents: list[dict[str, Any]]  # as given: {"id", "text", "metadata"?}
    questions: list[dict[str, Any]]  # {"q", "expect", "split", "source"}
    paraphrased: bool = False

    def passages(self) -> list[dict[str, Any]]:
        """The documents as upload items: short ones unchanged, longer ones in pieces."""
        out: list[dict[str, Any]] = []
        for doc in self.documents:
            texts = upload_pieces(doc["text"])
            if len(texts) == 1:
                out.append(doc)
                continue
            for n, text in enumerate(texts):
                out.append({**doc, "id": f"{doc['id']}#chunk-{n}", "text": text})
        return out


def _read(path: Path, model: type[BaseModel]) -> Any:
    if not path.is_file():
        raise SetError(f"{path}: missing (a set needs documents.json and questions.json)")
    try:
        return model.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise SetError(f"{path}: not JSON: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        )
        raise SetError(f"{path}: {problems}") from exc


def load(spec: str) -> EvalSet:
    """A set by name (`benches/quality/eval/<name>`) or by the path of its directory."""
    directory = EVAL / spec if "/" not in spec and (EVAL / spec).is_dir() else Path(spec)
    if not directory.is_dir():
        known = ", ".join(
            sorted(p.name for p in EVAL.iterdir() if (p / "questions.json").is_file())
        )
        raise SetError(f"{spec}: no such set (known: {known}; or give a directory's path)")
    documents: _Documents = _read(directory / "documents.json", _Documents)
    questions: _Questions = _read(directory / "questions.json", _Questions)
    ids = {d.id for d in documents.documents}
    for n, q in enumerate(questions.questions):
        where = f"{directory / 'questions.json'}: questions.{n} ({q.q!r})"
        if q.source is not None and q.source not in ids:
            raise SetError(f"{where}: source {q.source!r} is not a document id")
        if questions.paraphrased and q.expect is not None and q.source is None:
            raise SetError(f"{where}: a paraphrased set names the source of every answerable one")
    return EvalSet(
        directory.resolve().name,
        [d.model_dump(exclude_none=True) for d in documents.documents],
        [q.model_dump() for q in questions.questions],
        questions.paraphrased,
    )


# --- the asker's own words ----------------------------------------------------------

# A question asked in one's own words shares at most this many content words
# with the document that answers it, names and numbers aside.
MAX_SHARED_WORDS = 1
_TOKEN = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)$")


def _names(text: str, first_is_name: bool) -> set[str]:
    """Lower-cased words `text` only ever writes capitalised away from a
    sentence start ("Church Square", "HR", "Qi"): the names in it."""
    capital: set[str] = set()
    lower: set[str] = set()
    for match in _TOKEN.finditer(text):
        word = match.group()
        for part in word.split("-"):
            if not part[:1].isupper():
                lower.add(part.lower())
            elif first_is_name or not _SENTENCE_START.search(text[: match.start()]):
                capital.add(part.lower())
    return capital - lower


def _content(text: str, names: set[str]) -> set[str]:
    """Stemmed content words of `text` and of the parts of hyphenated ones,
    without stopwords, names, numbers and single letters."""
    out: set[str] = set()
    for token in _TOKEN.finditer(text.replace("\u2019", "'")):
        whole = token.group().lower().removesuffix("'s")
        for word in {whole, *whole.split("-")}:
            if len(word) < 2 or any(c.isdigit() for c in word):
                continue
            if word in STOPWORDS or word in names:
                continue
            out.add(stem(word))
    return out


def shared_words(question: str, document: str) -> set[str]:
    """The content words (stemmed) a question shares with a document, names
    (words either writes capitalised mid-sentence) and numbers aside."""
    names = _names(document, first_is_name=False) | _names(question, first_is_name=False)
    return _content(question, names) & _content(document, names)


def reworded(evset: EvalSet) -> list[tuple[str, set[str]]]:
    """The answerable questions sharing more than `MAX_SHARED_WORDS` content
    words with their source document, with the words."""
    texts = {d["id"]: d["text"] for d in evset.documents}
    out = []
    for q in evset.questions:
        if q["expect"] is None or q.get("source") is None:
            continue
        shared = shared_words(q["q"], texts[q["source"]])
        if len(shared) > MAX_SHARED_WORDS:
            out.append((q["q"], shared))
    return out


# --- cutting text as an upload script would ------------------------------------------


def paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.strip().splitlines()]
        joined = " ".join(line for line in lines if line)
        if joined:
            out.append(joined)
    return out


def pack(parts: list[str], sep: str, max_chars: int) -> list[str]:
    """Consecutive parts joined by `sep` while they fit in `max_chars`; a part
    longer than that stands alone."""
    out: list[str] = []
    current = ""
    for part in parts:
        if current and len(current) + len(sep) + len(part) > max_chars:
            out.append(current)
            current = ""
        current = f"{current}{sep}{part}" if current else part
    if current:
        out.append(current)
    return out


def pieces(para: str, max_chars: int) -> list[str]:
    """A paragraph, cut at sentence ends into parts of at most `max_chars` when
    longer, and between words where no sentence end helps (a table)."""
    if len(para) <= max_chars:
        return [para]
    sentences = pack(re.split(r"(?<=[.!?:])\s+", para), " ", max_chars)
    return [part for piece in sentences for part in pack(piece.split(" "), " ", max_chars)]


def chunk(text: str, max_chars: int = MAX_CHARS) -> list[str]:
    """Whole paragraphs merged while they fit; a longer paragraph is cut at sentence ends."""
    parts = [p for whole in paragraphs(text) for p in pieces(whole, max_chars)]
    return pack(parts, "\n\n", max_chars)


def chunk_lines(text: str, max_chars: int = MAX_CHARS) -> list[str]:
    """Blocks (blank-line separated) merged while they fit, their lines kept;
    a longer block is cut between lines."""
    blocks = [b.strip("\n") for b in re.split(r"\n\s*\n", text) if b.strip()]
    parts = [p for block in blocks for p in pack(block.split("\n"), "\n", max_chars)]
    return pack(parts, "\n\n", max_chars)


def upload_pieces(text: str, max_chars: int = MAX_CHARS) -> list[str]:
    """A document as upload pieces: itself when it fits; else its lines kept
    (`chunk_lines`), a line still too long cut at sentence ends (`chunk`)."""
    if len(text) <= max_chars:
        return [text]
    return [
        piece
        for part in chunk_lines(text, max_chars)
        for piece in (chunk(part, max_chars) if len(part) > max_chars else [part])
    ]
