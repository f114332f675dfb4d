"""The model context's sequences: which are free, which tokens each holds
in the KV cache, and where a new prompt starts reading.

A request that finds the model idle is answered as on a fresh start, bit
for bit: the cache is emptied but for the cells of its stable start (the
system turn) when an earlier idle request read that same start alone, as
the first step after the cache was emptied, at the cells a fresh read puts
it in. Where a token's cells sit and which tokens share its step change the
order of sums, and the quantized kernels round those differences up: an
answer near a verifier's threshold would otherwise be given or declined by
what was asked before. A request admitted beside others, and a
conversation's next turn (the turns before it are not read again), start
from the longest start they share with any sequence, and their numbers
depend on what the cache held.

Only the engine's driver thread calls these, under the engine's lock.
"""

from __future__ import annotations

from collections.abc import Sequence

from flask_app.inference.job import Decoder


def shared_start(a: Sequence[int], b: Sequence[int]) -> int:
    n, most = 0, min(len(a), len(b))
    while n < most and a[n] == b[n]:
        n += 1
    return n


class Sequences:
    def __init__(self, decoder: Decoder, n_seq: int) -> None:
        self._decoder = decoder
        self.n_seq = n_seq
        self.free = list(range(n_seq))
        self.held: dict[int, list[int]] = {s: [] for s in range(n_seq)}  # tokens in each
        # (sequence, tokens): a stable start read alone right after the cache
        # was emptied, at the cells a fresh read puts it in
        self._fresh_start: tuple[int, list[int]] | None = None
        self._reading_fresh: tuple[int, list[int]] | None = None  # being read so

    def forget(self, seq: int, start: int) -> None:
        """Drop `seq`'s cells from position `start` on."""
        fresh = self._fresh_start
        if fresh is not None and fresh[0] == seq and start < len(fresh[1]):
            self._fresh_start = None
        self._decoder.seq_rm(seq, start)
        self.held[seq] = self.held[seq][:start]

    def give_back(self, seq: int) -> None:
        """`seq` is free again; it keeps what it holds for a later prompt."""
        if seq not in self.free:
            self.free.append(seq)

    def forget_free(self) -> bool:
        """Drop what free sequences hold; False when they held nothing."""
        forgot = False
        for seq in self.free:
            if self.held[seq]:
                self.forget(seq, 0)
                forgot = True
        return forgot

    def fork(self, source: int, target: int, prompt: list[int]) -> None:
        """`target` shares `source`'s cells of `prompt`."""
        self.forget(target, 0)
        self._decoder.seq_cp(source, target, len(prompt))
        self.held[target] = list(prompt)

    def take(self, prompt: list[int], stable: int, count: int, idle: bool) -> tuple[list[int], int]:
        """`count` free sequences for `prompt`, the first to read it into,
        and where its reading starts (as on a fresh start when `idle`)."""
        if not idle:
            self._reading_fresh = None  # its cells may land before that start's
        best, start = self._take_idle(prompt, stable) if idle else self._take_busy(prompt)
        self.free.remove(best)  # holds prompt[:start] now
        others = sorted(self.free, key=lambda s: len(self.held[s]))[: count - 1]
        for seq in others:
            self.free.remove(seq)
        return [best, *others], start

    def _take_busy(self, prompt: list[int]) -> tuple[int, int]:
        """The longest start any sequence holds: a free one's, or one in use's."""
        head = prompt[:-1]  # the last token is always read, for its logits
        best = max(self.free, key=lambda s: shared_start(self.held[s], head))
        start = shared_start(self.held[best], head)
        busy = [s for s in range(self.n_seq) if s not in self.free and s != best]
        donor = max(busy, key=lambda s: shared_start(self.held[s], head), default=None)
        donated = 0 if donor is None else shared_start(self.held[donor], head)
        if donor is not None and donated > start:
            self.fork(donor, best, prompt[:donated])
            return best, donated
        self.forget(best, start)
        return best, start

    def _take_idle(self, prompt: list[int], stable: int) -> tuple[int, int]:
        """The cache emptied but for the fresh stable start `prompt` shares."""
        start_tokens = prompt[:stable] if stable < len(prompt) else []
        fresh = self._fresh_start
        keep = fresh is not None and bool(start_tokens) and fresh[1] == start_tokens
        best = fresh[0] if fresh is not None and keep else self.free[0]
        for seq in range(self.n_seq):
            if self.held[seq] and (seq != best or not keep):
                self.forget(seq, 0)
        if keep:
            self.forget(best, len(start_tokens))
            return best, len(start_tokens)
        self._reading_fresh = (best, start_tokens) if start_tokens else None
        return best, 0

    def read(self, seq: int, tokens: list[int], step_size: int) -> None:
        """`seq` holds `tokens` now, the last read in a step of `step_size`
        entries (the whole step: a fresh stable start read alone)."""
        self.held[seq] = tokens
        reading, self._reading_fresh = self._reading_fresh, None
        if reading is not None and reading == (seq, tokens) and step_size == len(tokens):
            self._fresh_start = reading
