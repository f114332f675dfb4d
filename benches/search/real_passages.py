"""Real passages from documents on this machine, and their MiniLM vectors.

Paragraphs of 120-1,000 characters, deduplicated, in a fixed order: the AWS
CLI's reStructuredText help (installed with the system Python), Debian's
package documentation (`/usr/share/doc`: copyright files, READMEs,
changelogs) and the manual pages (roff requests and font escapes removed).
The vectors are the server's default embedder's; they are cached in
`~/.cache/edgerag-bench/` by count and embedder file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

MIN_CHARS, MAX_CHARS = 120, 1000
CACHE = Path.home() / ".cache" / "edgerag-bench"

_ROFF_ESCAPE = re.compile(r"\\f[BIRPC]|\\f\(..|\\\(..|\\[-&e|^]|\\s[-+]?\d")


def _read(path: Path) -> str:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""
    return raw.decode("utf-8", errors="replace")


def _roff_to_text(source: str) -> str:
    lines = []
    for line in source.splitlines():
        if line.startswith((".", "'")):
            # a paragraph break for paragraph macros, nothing for the rest
            if line[1:3] in ("PP", "P", "LP", "SH", "SS", "TP", "IP", "sp"):
                lines.append("")
            continue
        lines.append(_ROFF_ESCAPE.sub("", line))
    return "\n".join(lines)


def _sources() -> Iterator[str]:
    stdlib = Path(sys.base_prefix) / "lib"
    yield from (_read(p) for p in sorted(stdlib.glob("python3*/site-packages/awscli/**/*.rst")))
    doc = Path("/usr/share/doc")
    for pattern in ("*/copyright", "*/README*", "*/changelog*"):
        yield from (_read(p) for p in sorted(doc.glob(pattern)) if p.is_file())
    for page in sorted(Path("/usr/share/man").glob("man[1-8]/*.gz")):
        yield _roff_to_text(_read(page))


def passages(limit: int) -> list[str]:
    """Up to `limit` distinct paragraphs (fewer when the machine has fewer)."""
    seen: set[str] = set()
    out: list[str] = []
    for text in _sources():
        for para in re.split(r"\n\s*\n", text):
            flat = " ".join(para.split())
            if not MIN_CHARS <= len(flat) <= MAX_CHARS or flat.startswith(("..", "::", "+-")):
                continue
            if sum(c.isalpha() for c in flat) < 0.6 * len(flat):
                continue  # tables, code, rules
            if flat not in seen:
                seen.add(flat)
                out.append(flat)
                if len(out) == limit:
                    return out
    return out


def vectors(count: int) -> tuple[list[str], np.ndarray]:
    """`count` passages and their unit vectors (count x 384, float32); from
    the cache when this machine's candidates and the model are unchanged."""
    from flask_app.settings import Settings

    model = Settings.load({}, {}).embed_path()
    candidates = passages(count * 2)
    key = hashlib.sha256(("\n".join(candidates) + str(model)).encode()).hexdigest()[:16]
    cached = CACHE / f"passages-{count}-{key}"
    if cached.with_suffix(".npy").is_file() and cached.with_suffix(".json").is_file():
        texts: list[str] = json.loads(cached.with_suffix(".json").read_text())
        return texts, np.load(cached.with_suffix(".npy"))
    texts, matrix = _embed(candidates, count, model)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(cached.with_suffix(".npy"), matrix)
    cached.with_suffix(".json").write_text(json.dumps(texts))
    return texts, matrix


def _embed(candidates: list[str], count: int, model: Path) -> tuple[list[str], np.ndarray]:
    from flask_app.inference.embed import LlamaEmbedder

    embedder = LlamaEmbedder(model)
    # the model reads 512 tokens at most; longer paragraphs (keys, dumps) are left out
    texts = [t for t in candidates if embedder.count_tokens(t) <= embedder.max_tokens][:count]
    if len(texts) < count:
        raise SystemExit(f"only {len(texts):,} passages on this machine (wanted {count:,})")
    started = time.perf_counter()
    parts = []
    for lo in range(0, count, 256):
        parts.append(embedder.embed(texts[lo : lo + 256]))
        if (lo // 256) % 20 == 0:
            rate = (lo + 256) / (time.perf_counter() - started)
            print(f"  embedded {min(count, lo + 256):,}/{count:,} ({rate:.0f}/s)", flush=True)
    matrix = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return texts, matrix


if __name__ == "__main__":
    found = passages(int(sys.argv[1]) if len(sys.argv) > 1 else 60_000)
    print(f"{len(found):,} passages, {sum(map(len, found)) / len(found):.0f} characters on average")
