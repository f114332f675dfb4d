"""Compare the chat models' pulled quantizations: prompt tokens/s, generation
tokens/s, and grounded-answer accuracy on a small fixed question set.

    .venv/bin/python benches/quant_choice.py [--llm NAME ...] [--repeats 3] [--json out.json]

Each model loads in turn with the same settings; the prompt-speed probe clears
the KV cache first so no prefix is reused.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from flask_app.inference.llm import ChatMessage, LlamaBackend, Sampling
from flask_app.inference.presets import PRESETS
from flask_app.settings import Settings

SYSTEM = (
    "You answer questions using only the document below. Answer in one short sentence. "
    "If the document does not contain the answer, say: I don't know."
)

# (document, question, expected substring (lowercase) or None when unanswerable)
QUESTIONS: list[tuple[str, str, str | None]] = [
    (
        "The Harlow Bridge opened to traffic on 14 March 1998 after four years of construction.",
        "When did the Harlow Bridge open?",
        "1998",
    ),
    (
        "Mount Ketra rises 3,412 metres above sea level and is the tallest peak in the Orin range.",
        "How tall is Mount Ketra?",
        "3,412",
    ),
    (
        "The Velo X2 e-bike has a 500 Wh battery that charges fully in 4.5 hours.",
        "How long does the Velo X2 battery take to charge?",
        "4.5",
    ),
    (
        "Dr. Amara Osei founded the Lumen Institute in Accra to study coastal erosion.",
        "Who founded the Lumen Institute?",
        "osei",
    ),
    (
        "Orders above 60 euros ship free; smaller orders pay a flat 4.90 euro fee.",
        "What is the shipping fee for small orders?",
        "4.90",
    ),
    (
        "The museum is open Tuesday to Sunday from 10:00 to 18:00 and closed on Mondays.",
        "On which day is the museum closed?",
        "monday",
    ),
    (
        "Project Falcon was renamed Project Kestrel in 2021 when the budget doubled.",
        "What was Project Falcon renamed to?",
        "kestrel",
    ),
    (
        "The Rivo water filter must be replaced every 90 days or after 400 litres.",
        "How often must the Rivo filter be replaced?",
        "90",
    ),
    (
        "The Tamsin cafe serves breakfast until 11 am and uses oat milk by default.",
        "What milk does the Tamsin cafe use by default?",
        "oat",
    ),
    (
        "Berenice Lake freezes over most winters; its maximum depth is 47 metres.",
        "What is the maximum depth of Berenice Lake?",
        "47",
    ),
    (
        "The Harlow Bridge opened to traffic on 14 March 1998 after four years of construction.",
        "Who designed the Harlow Bridge?",
        None,
    ),
    (
        "The Velo X2 e-bike has a 500 Wh battery that charges fully in 4.5 hours.",
        "What is the top speed of the Velo X2?",
        None,
    ),
]

LONG_PROMPT = " ".join(
    f"Paragraph {i}: the quarterly report lists revenue, costs, staffing and open risks."
    for i in range(40)
)


def prompt_speed(backend: LlamaBackend, repeats: int) -> tuple[float, int]:
    llama = backend._llama
    rates = []
    n = 0
    for r in range(repeats):
        llama.reset()  # type: ignore[no-untyped-call]  # no KV prefix reuse
        tokens = llama.tokenize(f"Run {r}. {LONG_PROMPT}".encode())
        n = len(tokens)
        start = time.perf_counter()
        llama.eval(tokens)
        rates.append(n / (time.perf_counter() - start))
    return statistics.median(rates), n


def generation_speed(backend: LlamaBackend, repeats: int) -> float:
    rates = []
    messages: list[ChatMessage] = [
        {"role": "user", "content": "Write a long story about a lighthouse keeper."}
    ]
    prompt = backend.render(messages)
    for _ in range(repeats):
        first = None
        count = 0
        for _piece in backend.generate(
            prompt, max_tokens=96, sampling=Sampling(temperature=0.0), probe=None
        ):
            count += 1
            if first is None:
                first = time.perf_counter()
        end = time.perf_counter()
        if first is not None and count > 1:
            rates.append((count - 1) / (end - first))
    return statistics.median(rates)


def accuracy(backend: LlamaBackend) -> dict[str, float]:
    answered = refused = n_ans = n_unans = 0
    for document, question, expected in QUESTIONS:
        messages: list[ChatMessage] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Document: {document}\n\nQuestion: {question}"},
        ]
        reply = "".join(
            backend.generate(
                backend.render(messages),
                max_tokens=48,
                sampling=Sampling(temperature=0.0),
                probe=None,
            )
        ).lower()
        if expected is None:
            n_unans += 1
            refused += "don't know" in reply or "do not know" in reply
        else:
            n_ans += 1
            answered += expected in reply.replace("\u2019", "'")
    return {"answer_accuracy": answered / n_ans, "refusal_rate": refused / n_unans}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--llm", nargs="+", choices=list(PRESETS), default=list(PRESETS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings.load({}, os.environ)
    rows = []
    pulled = [
        (name, quant, artifact)
        for name in args.llm
        for quant, artifact in PRESETS[name].files().items()
        if (settings.model_dir / artifact.filename).is_file()
    ]
    for name, quant, artifact in pulled:
        backend = LlamaBackend(settings.model_dir / artifact.filename, n_ctx=2048)
        pp, n_prompt = prompt_speed(backend, args.repeats)
        tg = generation_speed(backend, args.repeats)
        row = {
            "llm": name,
            "quant": quant,
            "model_id": backend.model_id,
            "file_mb": round((settings.model_dir / artifact.filename).stat().st_size / 1e6),
            "prompt_tokens": n_prompt,
            "prompt_tok_s": round(pp, 1),
            "gen_tok_s": round(tg, 1),
            **accuracy(backend),
        }
        rows.append(row)
        print(json.dumps(row))
        del backend
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
