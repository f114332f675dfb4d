"""Text extraction per content type. Spans index the extracted text exactly
(`text[start:end]` in code points), so text types are decoded and kept as they
are (a leading BOM removed), HTML becomes its visible text and a PDF its page
texts joined by form feeds."""

from __future__ import annotations

import io
from html.parser import HTMLParser

CONTENT_TYPES = (
    "text/plain",
    "text/markdown",
    "text/html",
    "text/csv",
    "application/json",
    "application/pdf",
)
BINARY_TYPES = frozenset({"application/pdf"})


class ExtractionError(ValueError):
    """The file cannot be read as its content type (the message says why)."""


def _decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExtractionError(f"not UTF-8 text (byte {exc.start})") from None
    return text.removeprefix("\ufeff")


class _Visible(HTMLParser):
    """The text a browser would show: no scripts, styles or markup; block
    elements end lines."""

    HIDDEN = frozenset({"script", "style", "head", "title", "noscript", "template"})
    BLOCKS = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "pre"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self._hidden += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def _html(text: str) -> str:
    parser = _Visible()
    parser.feed(text)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).split("\n")]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def _pdf(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise ExtractionError(f"not a readable PDF: {exc}") from None
    return "\f".join(pages)


def extract(data: bytes, content_type: str) -> str:
    """The file's text; ExtractionError when it cannot be read."""
    if content_type == "application/pdf":
        text = _pdf(data)
    elif content_type == "text/html":
        text = _html(_decode(data))
    elif content_type in CONTENT_TYPES:
        text = _decode(data)
    else:
        raise ExtractionError(f"unsupported content type {content_type}")
    if not text.strip():
        raise ExtractionError("no text could be extracted")
    return text
