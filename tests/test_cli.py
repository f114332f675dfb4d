from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flask_app.cli.main import build_parser, flag_of, main
from flask_app.settings import Settings


def test_serve_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for name, _kind, _help, _default in Settings.options():
        assert flag_of(name) in out
        assert "EDGERAG_" + name.upper() in out


def test_top_level_help_lists_commands() -> None:
    help_text = build_parser().format_help()
    assert "serve" in help_text and "pull" in help_text


def test_bad_option_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--port", "eighty"])
    assert info.value.code == 2
    assert "port: expected int" in capsys.readouterr().err


def test_serve_without_models_says_how_to_fix(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flask_app.cli", "serve", "--model-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "edgerag pull" in result.stderr


def test_api_key_flag_is_repeatable() -> None:
    from flask_app.cli.main import _settings

    args = build_parser().parse_args(["serve", "--api-key", "one", "--api-key", "two"])
    assert _settings(args).api_key_specs() == ("one", "two")
