"""What decoding several answers in one llama.cpp batch would give, measured
below the server: N requests that arrive together, answered one after
another (as served today: one sequence, its prompt then its tokens) or in
one batch (one KV cache shared by N sequences; each step decodes one token of
every answering sequence plus up to CHUNK prompt tokens of the first one
still reading its prompt, so a long prompt does not stall the streams; a
prompt copies the start it shares with one already read instead of reading
it again).

Prompts are the server's own: the README tour's two notes and the `own`
evaluation set's documents, each question grounded by the answer pipeline
(`ground`) and rendered with the preset's chat template. Decoding is greedy
(argmax) in both ways, so the answers can be compared token for token.
Reported per N: answers per minute, time to first token p50/p95 (all N
arrive at t = 0), and how many answers differ from one-at-a-time.

    .venv/bin/python benches/batched_decode.py [--llm NAME] [--clients 1 2 4 8] \
        [--max-tokens 64] [--json benches/results/batched_decode.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benches.answer_latency import QUESTIONS as EVAL_QUESTIONS
from benches.tour import TOUR, TOUR_QUESTIONS
from flask_app import rag
from flask_app.api.http.extensions import answer_config_of
from flask_app.app import create_app
from flask_app.inference.llama_runtime import renew_context
from flask_app.inference.llm import Sampling
from flask_app.inference.presets import DEFAULT_LLM, PRESETS
from flask_app.rag.answer import ground
from flask_app.rag.retrieval import StoredCollection
from flask_app.services import load_services
from flask_app.settings import Settings

HERE = Path(__file__).parent / "eval"
CHUNK = 64  # prompt tokens that ride along with a decoding step
N_BATCH = 512


def prompts(llm: str, docs: list[dict[str, Any]], questions: list[str]) -> list[str]:
    """Each question grounded by the answer pipeline over `docs`, rendered."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load({"data_dir": Path(tmp), "llm": llm}, os.environ)
        services = load_services(settings)
        app = create_app(settings, services)
        r = app.test_client().post("/upload", json={"store_mode": "text", "items": docs})
        assert r.status_code == 200, r.get_json()
        llm_ = services.llm
        assert llm_ is not None and services.embedder is not None
        with app.app_context():
            config = answer_config_of(app)
        out = []
        collection = services.store.edge()
        for q in questions:
            question = rag.Question(query=q, top_k=5, sampling=Sampling(temperature=0.0))
            vector = rag.query_vector(collection, question, services.embedder)
            grounding = ground(llm_, StoredCollection(collection, vector), question, config)
            assert grounding.prompt is not None
            out.append(llm_.backend.render(grounding.prompt.messages))
        services.store.close()
        return out


class Engine:
    """One llama.cpp context for `n_seq` sequences over one unified KV cache."""

    def __init__(self, path: Path, n_seq: int, n_ctx_per_seq: int, threads: int) -> None:
        import llama_cpp

        self.lib = llama_cpp
        self.llama: Any = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx_per_seq,
            n_batch=N_BATCH,
            n_ubatch=256,
            n_threads=threads,
            n_threads_batch=threads,
            use_mmap=False,
            verbose=False,
        )
        params = self.llama.context_params
        params.n_ctx = n_ctx_per_seq * n_seq
        params.n_seq_max = n_seq
        params.kv_unified = n_seq > 1  # a prompt start copied between sequences needs it
        renew_context(self.llama)
        self.ctx = self.llama._ctx.ctx
        self.n_vocab = self.llama.n_vocab()
        self.eos = {self.llama.token_eos(), *self._end_tokens()}
        self.batch = llama_cpp.llama_batch_init(N_BATCH + n_seq, 0, 1)

    def _end_tokens(self) -> list[int]:
        out = []
        for text in ("<|im_end|>", "<|endoftext|>"):
            ids = self.llama.tokenize(text.encode(), add_bos=False, special=True)
            if len(ids) == 1:
                out.append(ids[0])
        return out

    def tokens(self, prompt: str) -> list[int]:
        return list(self.llama.tokenize(prompt.encode(), add_bos=False, special=True))

    def clear(self) -> None:
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode of (token, position, sequence, wants logits) entries."""
        b = self.batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = logits
        b.n_tokens = len(entries)
        status = self.lib.llama_decode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")

    def argmax(self, index: int) -> int:
        row = self.lib.llama_get_logits_ith(self.ctx, index)
        values = np.ctypeslib.as_array(
            ctypes.cast(row, ctypes.POINTER(ctypes.c_float)), (self.n_vocab,)
        )
        return int(values.argmax())


class Request:
    """One client's prompt and answer, as sequence `seq` of the context."""

    def __init__(self, seq: int, tokens: list[int]) -> None:
        self.seq = seq
        self.prompt = tokens
        self.read = 0  # prompt tokens in the cache
        self.out: list[int] = []
        self.first: float | None = None
        self.done = False


def shared(a: list[int], b: list[int]) -> int:
    """Tokens at the start of `a` that `b` shares (at most len(a) - 1: the last
    prompt token is always read, for its logits)."""
    n = 0
    while n < min(len(a) - 1, len(b)) and a[n] == b[n]:
        n += 1
    return n


def one_after_another(engine: Engine, texts: list[str], max_tokens: int) -> dict[str, Any]:
    """Today's way: each request's prompt, then its tokens, then the next; the
    start it shares with the previous prompt (the system prompt) stays cached,
    as llama-cpp-python keeps it."""
    engine.clear()
    started = time.perf_counter()
    firsts, outs = [], []
    previous: list[int] = []
    reading = 0.0  # seconds spent reading prompts
    for text in texts:
        s = Request(0, engine.tokens(text))
        s.read = shared(s.prompt, previous)
        engine.lib.llama_memory_seq_rm(engine.lib.llama_get_memory(engine.ctx), 0, s.read, -1)
        previous = s.prompt
        begun = time.perf_counter()
        while s.read < len(s.prompt):
            part = s.prompt[s.read : s.read + N_BATCH]
            last = s.read + len(part) == len(s.prompt)
            engine.decode(
                [(t, s.read + i, 0, last and i == len(part) - 1) for i, t in enumerate(part)]
            )
            s.read += len(part)
        token = engine.argmax(-1)
        reading += time.perf_counter() - begun
        firsts.append(time.perf_counter() - started)
        while token not in engine.eos and len(s.out) < max_tokens:
            s.out.append(token)
            engine.decode([(token, len(s.prompt) + len(s.out) - 1, 0, True)])
            token = engine.argmax(-1)
        outs.append(s.out)
    wall = time.perf_counter() - started
    return {"wall_s": wall, "ttft_s": firsts, "tokens": outs, "prompt_share": reading / wall}


def together(
    engine: Engine, texts: list[str], max_tokens: int, chunk: int = CHUNK
) -> dict[str, Any]:
    """All requests in one batch: per llama_decode, every answering
    sequence's next token plus up to `chunk` tokens of the first prompt still
    being read (a whole batch while none is answering). A prompt about to be
    read first takes, from the sequence already in the cache that shares the
    longest start with it, that start (llama_memory_seq_cp): the system
    prompt, and on a small store the same documents."""
    engine.clear()
    memory = engine.lib.llama_get_memory(engine.ctx)
    seqs = [Request(i, engine.tokens(t)) for i, t in enumerate(texts)]
    started = time.perf_counter()
    pending: dict[int, int] = {}  # seq -> its token to feed next
    while not all(s.done for s in seqs):
        entries: list[tuple[int, int, int, bool]] = []
        owners: list[Request | None] = []
        for s in seqs:
            if s.seq in pending:
                entries.append((pending[s.seq], len(s.prompt) + len(s.out) - 1, s.seq, True))
                owners.append(s)
        reading = next((s for s in seqs if s.read < len(s.prompt)), None)
        if reading is not None:
            if reading.read == 0:
                donors = [(min(shared(reading.prompt, o.prompt), o.read), o) for o in seqs]
                length, donor = max(donors, key=lambda d: d[0])
                if length > 0:
                    engine.lib.llama_memory_seq_cp(memory, donor.seq, reading.seq, 0, length)
                    reading.read = length
            budget = chunk if entries else N_BATCH
            part = reading.prompt[reading.read : reading.read + budget]
            last = reading.read + len(part) == len(reading.prompt)
            for i, t in enumerate(part):
                is_last = last and i == len(part) - 1
                entries.append((t, reading.read + i, reading.seq, is_last))
                owners.append(reading if is_last else None)
            reading.read += len(part)
        engine.decode(entries)
        now = time.perf_counter()
        for index, owner in enumerate(owners):
            if owner is None:
                continue
            token = engine.argmax(index)
            if owner.first is None:
                owner.first = now - started
            if token in engine.eos or len(owner.out) >= max_tokens:
                owner.done = True
                pending.pop(owner.seq, None)
                continue
            owner.out.append(token)
            pending[owner.seq] = token
    return {
        "wall_s": time.perf_counter() - started,
        "ttft_s": [s.first for s in seqs],
        "tokens": [s.out for s in seqs],
    }


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def step_costs(engine: Engine, clients: list[int], rounds: int = 15) -> dict[str, float]:
    """Seconds one llama_decode takes (medians): a 64-token prompt chunk of
    one sequence, and one answer token for each of n sequences, every one
    with 130 tokens of context, for each n in `clients`."""
    text = "The museum is open Tuesday to Sunday and the guest network is Calder-Guest. " * 8
    toks = engine.tokens(text)[:130]
    out = {}
    times = []
    for _ in range(5):
        engine.clear()
        started = time.perf_counter()
        engine.decode([(t, i, 0, i == 63) for i, t in enumerate(toks[:64])])
        times.append(time.perf_counter() - started)
    out["prompt_64"] = statistics.median(times)
    for n in clients:
        engine.clear()
        for seq in range(n):
            engine.decode([(t, i, seq, i == len(toks) - 1) for i, t in enumerate(toks)])
        times = []
        for step in range(rounds):
            started = time.perf_counter()
            engine.decode([(toks[step], len(toks) + step, seq, True) for seq in range(n)])
            times.append(time.perf_counter() - started)
        out[f"answer_step_{n}"] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", choices=list(PRESETS), default=DEFAULT_LLM)
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=CHUNK, help="prompt tokens per step")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    own = json.loads((HERE / "own" / "documents.json").read_text())["documents"]
    kinds = {
        "tour": prompts(args.llm, TOUR, TOUR_QUESTIONS),
        "evaluation": prompts(args.llm, own, EVAL_QUESTIONS),
    }
    settings = Settings.load({"llm": args.llm}, os.environ)
    most = max(args.clients)
    single = Engine(settings.llm_path(), 1, 2048, settings.llm_threads)
    batched = Engine(settings.llm_path(), most, 2048, settings.llm_threads)
    costs = step_costs(batched, sorted({1, *args.clients}))
    print("one llama_decode: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in costs.items()))
    results: dict[str, Any] = {
        "llm": args.llm,
        "max_tokens": args.max_tokens,
        "chunk": args.chunk,
        "step_ms": {k: round(v * 1000, 1) for k, v in costs.items()},
        "kinds": {},
    }
    for kind, texts in kinds.items():
        tokens = [single.tokens(t) for t in texts]
        common = min(shared(t, tokens[0]) for t in tokens[1:])
        alone = one_after_another(single, texts, args.max_tokens)
        unique = statistics.mean(len(t) - common for t in tokens)
        answer = statistics.mean(len(t) for t in alone["tokens"])
        shape = {
            "shared_prompt_tokens": common,
            "mean_unique_prompt_tokens": round(unique, 1),
            "mean_answer_tokens": round(answer, 1),
        }
        print(f"{kind}: {json.dumps(shape)}", flush=True)
        rows = []
        for n in args.clients:
            ways: dict[str, dict[str, list[float]]] = {
                w: {"wall": [], "ttft": []} for w in ("one after another", "together")
            }
            differ = 0
            shares = []
            for r in range(args.rounds):
                group = [texts[(r * n + i) % len(texts)] for i in range(n)]
                a = one_after_another(single, group, args.max_tokens)
                b = together(batched, group, args.max_tokens, args.chunk)
                shares.append(a["prompt_share"])
                for way, res in (("one after another", a), ("together", b)):
                    ways[way]["wall"].append(res["wall_s"])
                    ways[way]["ttft"] += res["ttft_s"]
                differ += sum(x != y for x, y in zip(a["tokens"], b["tokens"], strict=True))
            row: dict[str, Any] = {
                "clients": n,
                "answers": n * args.rounds,
                "answers_differing": differ,
                "prompt_share_one_after_another": round(statistics.median(shares), 2),
            }
            for way, m in ways.items():
                row[way] = {
                    "answers_per_min": round(60 * n / statistics.median(m["wall"]), 1),
                    "ttft_p50_s": round(statistics.median(m["ttft"]), 3),
                    "ttft_p95_s": round(p95(m["ttft"]), 3),
                }
            row["throughput_ratio"] = round(
                row["together"]["answers_per_min"] / row["one after another"]["answers_per_min"], 2
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
        results["kinds"][kind] = {**shape, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
