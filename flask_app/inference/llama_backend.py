"""A GGUF chat model run by llama.cpp (through llama-cpp-python's C API):
its tokenizer and chat template, and one context whose sequences the
batch engine decodes together."""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flask_app.inference import hidden_state
from flask_app.inference.engine import BatchEngine, ContextFull, EngineError, Entry, State
from flask_app.inference.llama_runtime import (
    available_cores,
    model_id_from_metadata,
    renew_context,
    route_llama_logs,
)
from flask_app.inference.sampler import Logits

N_BATCH = 512
# compute buffers sized for 256 tokens a step: 21 MB less than 512, prompt
# reading as fast (benches/serving/memory.py, docs/performance.md)
N_UBATCH = 256


class LlamaDecoder:
    """`engine.Decoder` over a llama.cpp context with a hidden-state tap."""

    def __init__(self, llama: Any, tap: hidden_state.HiddenStateTap, n_seq: int) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self._ctx = llama._ctx.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._vocab = llama_cpp.llama_model_get_vocab(llama._model.model)
        self._n_vocab = int(llama.n_vocab())
        self._tap = tap
        self._batch = llama_cpp.llama_batch_init(N_BATCH + n_seq, 0, 1)
        self._buffer = ctypes.create_string_buffer(256)

    def decode(
        self, entries: Sequence[Entry], layers: tuple[int, ...]
    ) -> dict[int, dict[int, State]]:
        batch = self._batch
        for i, (token, position, seq, logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = position
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        batch.n_tokens = len(entries)
        if layers:
            outputs = [e[3] for e in entries]
            wanted = [i for i, out in enumerate(outputs) if out]
            self._tap.arm(layers, wanted, outputs, N_UBATCH)
        try:
            status = self._lib.llama_decode(self._ctx, batch)
        finally:
            states = self._tap.take() if layers else {}
        if status == 1:
            raise ContextFull(
                "the model's context window is full with the answers being written; retry shortly"
            )
        if status != 0:
            raise EngineError(f"llama_decode returned {status}")
        return states

    def logits(self, index: int) -> Logits:
        row = self._lib.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(
            ctypes.cast(row, ctypes.POINTER(ctypes.c_float)), (self._n_vocab,)
        ).copy()

    def seq_rm(self, seq: int, start: int) -> None:
        self._lib.llama_memory_seq_rm(self._memory, seq, start, -1)

    def seq_cp(self, source: int, target: int, end: int) -> None:
        self._lib.llama_memory_seq_cp(self._memory, source, target, 0, end)

    def is_end(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self._vocab, token))

    def piece(self, token: int) -> bytes:
        buf = self._buffer
        n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        return bytes(buf.raw[:n])


def _free(engine: BatchEngine | None, llama: Any, *_keep: Any) -> None:
    """Stop the engine (its step done), then free the context and the model
    (`_keep`: what must outlive them, the hidden-state callback).
    Left to `Llama.__del__` at the interpreter's teardown, `llama_free` now
    and then crashed a process whose work was done (SIGSEGV, exit -11)."""
    if engine is not None:
        engine.stop()
    llama.close()


class LlamaBackend:
    """A GGUF chat model: tokenizer, chat template and (unless `vocab_only`)
    one context of `n_ctx` cells shared by `n_seq` sequences, decoded by a
    `BatchEngine`."""

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int = 4096,
        n_seq: int = 8,
        n_threads: int | None = None,
        model_id: str | None = None,
        seed: int = 0,
        vocab_only: bool = False,
    ) -> None:
        """`vocab_only`: the tokenizer and chat template without the weights
        (counting and rendering only; a cluster's replicas generate)."""
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        route_llama_logs()
        if not path.is_file():
            raise FileNotFoundError(f"LLM model file not found: {path}")
        threads = n_threads or available_cores()
        self._llama = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_batch=N_BATCH,
            n_ubatch=N_UBATCH,
            n_threads=threads,
            n_threads_batch=threads,
            seed=seed,
            # llama.cpp repacks most weights for the CPU's SIMD (anonymous
            # memory); from a mapped file the pages it read them from would stay
            # resident too (+187 MB for the 0.5B, benches/serving/memory.py)
            use_mmap=False,
            vocab_only=vocab_only,
            verbose=False,
        )
        self._n_ctx = n_ctx if vocab_only else int(self._llama.n_ctx())
        metadata: dict[str, str] = self._llama.metadata
        template = metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"{path}: the GGUF has no chat template (tokenizer.chat_template)")
        eos = self._llama.detokenize([self._llama.token_eos()]).decode("utf-8", errors="ignore")
        bos_id = self._llama.token_bos()
        bos = (
            self._llama.detokenize([bos_id]).decode("utf-8", errors="ignore") if bos_id >= 0 else ""
        )
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self._model_id = model_id or model_id_from_metadata(metadata, path)
        self.path = path
        self.n_layers = 0
        self.replica_count = 1
        self.engine: BatchEngine | None = None
        if vocab_only:
            self._freed = weakref.finalize(self, _free, None, self._llama)
            return
        self.n_layers = int(llama_cpp.llama_model_n_layer(self._llama._model.model))
        tap = hidden_state.HiddenStateTap()
        params = self._llama.context_params
        params.cb_eval = tap.callback
        params.cb_eval_user_data = None
        params.n_seq_max = n_seq
        # one stream: a prompt's cells are shared by the branches forked from it
        params.kv_unified = True
        renew_context(self._llama)
        self._tap = tap  # the callback must outlive the context
        self.engine = BatchEngine(
            LlamaDecoder(self._llama, tap, n_seq), n_seq=n_seq, n_batch=N_BATCH
        )
        # at close, when collected, or at exit before the teardown
        self._freed = weakref.finalize(self, _free, self.engine, self._llama, tap)

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def tokens(self, text: str) -> list[int]:
        """`text`'s token ids as a rendered prompt holds them (no BOS added)."""
        ids: list[int] = self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return ids

    def count_tokens(self, text: str) -> int:
        return len(self.tokens(text))

    def first_tokens(self, words: Sequence[str]) -> tuple[int, ...]:
        """The token each of `words` starts with (a refusal's first words)."""
        return tuple(
            sorted(
                {
                    int(self._llama.tokenize(w.encode(), add_bos=False, special=False)[0])
                    for w in words
                }
            )
        )

    def render(self, messages: Sequence[Any]) -> str:
        rendered = self._formatter(messages=list(messages))
        return str(rendered.prompt)

    def close(self) -> None:
        self._freed()  # once: later calls do nothing
