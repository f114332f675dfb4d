"""benches/search/profile_search.py's reading of py-spy's folded stacks."""

from __future__ import annotations

from pathlib import Path

from benches.search.profile_search import stacks, summary


def test_folded_stacks_become_milliseconds_per_request(tmp_path: Path) -> None:
    folded = tmp_path / "raw.txt"
    folded.write_text(
        "thread (1): waitress-0;service (waitress/channel.py:512);parse (json_body.py:67) 300\n"
        "thread (1): waitress-0;service (waitress/channel.py:512);_rows (reads.py:181) 100\n"
        "thread (2): MainThread;loop (waitress/wasyncore.py:245);send (wasyncore.py:392) 100\n"
    )
    row = summary(stacks(folded), requests_served=100)  # 1,000 Hz: a sample is 1 ms
    assert row["python_ms"] == 5.0
    assert row["socket_loop_ms"] == 1.0
    assert row["largest_frames_ms"] == {
        "parse (json_body.py:67)": 3.0,
        "_rows (reads.py:181)": 1.0,
        "send (wasyncore.py:392)": 1.0,
    }
