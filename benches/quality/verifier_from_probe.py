"""A verifier file that reads only the prompt, made from an answerability
probe of the earlier file format (1) for the same GGUF.

    git show 3291251:flask_app/inference/probes/qwen2.5-coder-1.5b.json > /tmp/probe.json
    .venv/bin/python -m benches.quality.verifier_from_probe /tmp/probe.json

The format-1 probe (`benches/answer_probe.py build` in that commit, fitted
on 986 rows of our sets with their rewordings) read the hidden state at the
prompt's last token and gave P(the answer will be right). Here it becomes
the verifier's `answerable` probe, with its second stage folded into the
weights: every candidate's probability is that answerability, no answer is
written below the probe's own threshold (`skip_below`), and a candidate
that is the model's refusal is never chosen. No answer's state is read and
no sample is written: it is a gate, not a chooser, until the preset's
candidate rows are collected and `verifier_fit build` replaces it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flask_app.rag import verifier


def convert(old: dict[str, Any]) -> dict[str, Any]:
    """The format-2 verifier equivalent to format-1 probe `old` (raises
    ValueError for one that weighs any signal beside the hidden state)."""
    if old.get("format") != 1:
        raise ValueError(f"format {old.get('format')!r}: this reads format-1 probes")
    combine = old["combine"]
    if set(combine["weights"]) != {"hidden"}:
        raise ValueError(f"weighs {sorted(combine['weights'])}: only the hidden state folds in")
    scale = float(combine["weights"]["hidden"])
    threshold = float(old["threshold"])
    return {
        "format": verifier.FORMAT,
        "preset": old["preset"],
        "gguf_sha256": old["gguf_sha256"],
        "correct": None,
        "answerable": {
            "layer": int(old["layer"]),
            "reads": "prompt",
            "weights": [scale * float(w) for w in old["hidden"]["weights"]],
            "bias": scale * float(old["hidden"]["bias"]) + float(combine["bias"]),
        },
        "combine": {"weights": {"answerable": 1.0}, "bias": 0.0, "fill": {}},
        "policy": {
            "threshold": threshold,
            "samples": 0,
            "temperature": 0.8,
            "candidate_tokens": 16,
            "accept": None,
            "skip_below": threshold,
        },
        "trained": {
            "from": "a format-1 answerability probe (benches/quality/verifier_from_probe.py)",
            "probe_trained": old.get("trained"),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("probe", type=Path, help="a format-1 probe file")
    parser.add_argument("--out", type=Path, help="default: the shipped file of its preset")
    args = parser.parse_args(argv)
    new = convert(json.loads(args.probe.read_text(encoding="utf-8")))
    verifier.Verifier.from_dict(new)  # it must load as the server loads it
    out = args.out or verifier.verifier_path(new["preset"])
    out.write_text(json.dumps(new, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
