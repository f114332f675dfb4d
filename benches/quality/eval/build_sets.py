"""Build the passages of the evaluation sets from text that ships on this
machine and that nobody on the team wrote, chunked the way a user's upload
script would chunk it (paragraphs merged up to ~700 characters, a longer
paragraph cut at sentence ends; never trimmed around an answer):

- `python-reference`: the Python reference topics "debugger" (pdb) and
  "string-methods", from `pydoc_data.topics` (the interpreter's own help
  text): option- and parameter-dense technical reference.
- `gnu-help`: the `--help` text of GNU `ls`, `sort` (coreutils 9.1) and
  `grep` (3.8) as Debian ships them, in the C locale: option tables, one
  option per line with indented continuation lines, kept line by line (an
  upload script reading a text file keeps its lines).
- `licenses`: the GNU GPL version 3 and the Apache License 2.0 as Debian's
  base-files ships them (/usr/share/common-licenses): legal prose, two
  documents that define similar terms differently. Added after the pipeline
  was settled; no step was chosen on it.
- `maketext-article`: "Localization and Perl: gettext breaks, Maketext fixes"
  (Sean M. Burke and Jordan Lachler, The Perl Journal #13, shipped by Debian's
  perl-modules as Locale/Maketext/TPJ13.pod), rendered by `pod2text`:
  narrative, explanatory prose.

    .venv/bin/python benches/quality/eval/build_sets.py

writes benches/quality/eval/<set>/documents.json. The questions of each set
(benches/quality/eval/<set>/questions.json) were written by reading these passages;
each carries its split ("dev" or "test"), fixed before any tuning.
"""

from __future__ import annotations

import json
import pydoc_data.topics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benches.quality.eval_sets import chunk, chunk_lines

HERE = Path(__file__).parent
TPJ13 = Path("/usr/share/perl/5.36.0/Locale/Maketext/TPJ13.pod")
LICENSES = Path("/usr/share/common-licenses")  # Debian's base-files


def help_text(command: str) -> str:
    """`command --help` as printed in the C locale."""
    shown = subprocess.run(
        [command, "--help"],
        check=True,
        capture_output=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    )
    return shown.stdout.decode()


def documents(
    sources: list[tuple[str, str]], chunker: Callable[[str], list[str]] = chunk
) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for source, text in sources:
        for n, passage in enumerate(chunker(text)):
            docs.append(
                {"id": f"{source}-{n:03d}", "text": passage, "metadata": {"source": source}}
            )
    return docs


def pod_text(path: Path) -> str:
    """The POD rendered as plain text, as `pod2text --utf8` prints it."""
    rendered = subprocess.run(["pod2text", "--utf8", str(path)], check=True, capture_output=True)
    return rendered.stdout.decode("utf-8", errors="replace")


def main() -> None:
    topics = pydoc_data.topics.topics
    sets = {
        "python-reference": [
            ("pdb", topics["debugger"]),
            ("str-methods", topics["string-methods"]),
        ],
        "maketext-article": [
            ("tpj13", pod_text(TPJ13)),
        ],
        "gnu-help": [(command, help_text(command)) for command in ("ls", "sort", "grep")],
        "licenses": [
            (name.lower(), (LICENSES / name).read_text()) for name in ("GPL-3", "Apache-2.0")
        ],
    }
    for name, sources in sets.items():
        out = HERE / name / "documents.json"
        out.parent.mkdir(exist_ok=True)
        docs = documents(sources, chunk_lines if name == "gnu-help" else chunk)
        out.write_text(json.dumps({"documents": docs}, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {len(docs)} passages -> {out}")


if __name__ == "__main__":
    main()
