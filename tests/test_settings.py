from __future__ import annotations

from pathlib import Path

import pytest

from flask_app.inference.presets import PRESETS
from flask_app.settings import Settings, SettingsError


def test_defaults() -> None:
    s = Settings.load({}, {})
    assert (s.host, s.port, s.n_ctx, s.llm) == ("127.0.0.1", 8080, 4096, "qwen2.5-coder-0.5b")
    assert s.llm_path() == s.model_dir / "qwen2.5-coder-0.5b-instruct-q4_0.gguf"
    assert s.llm_threads >= 1


def test_cli_beats_env_beats_default() -> None:
    env = {"EDGERAG_PORT": "9001", "EDGERAG_N_CTX": "2048", "EDGERAG_NO_LLM": "true"}
    s = Settings.load({"port": "9002", "n_ctx": None}, env)
    assert s.port == 9002  # CLI wins
    assert s.n_ctx == 2048  # env over default
    assert s.no_llm is True


def test_paths_are_paths() -> None:
    s = Settings.load({"model": "/x/m.gguf"}, {"EDGERAG_DATA_DIR": "/tmp/d"})
    assert s.model == Path("/x/m.gguf") and s.data_dir == Path("/tmp/d")
    assert s.llm_path() == Path("/x/m.gguf")


def test_default_llm_path_follows_quant() -> None:
    s = Settings.load({"quant": "q4_k_m", "model_dir": "/m"}, {})
    assert s.llm_path() == Path("/m/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")


def test_the_llm_flag_picks_a_preset_file_and_its_calibrated_gates() -> None:
    big = Settings.load({"model_dir": "/m"}, {"EDGERAG_LLM": "qwen2.5-coder-1.5b"})
    assert big.llm_path() == Path("/m/qwen2.5-coder-1.5b-instruct-q4_0.gguf")
    assert big.llm_preset() == PRESETS["qwen2.5-coder-1.5b"]
    assert big.calibration() == PRESETS["qwen2.5-coder-1.5b"].calibration
    # an explicit gate setting wins over the preset's
    given = Settings.load({"answer_refusal_probability": "0.7"}, {"EDGERAG_LLM": big.llm})
    assert given.calibration().refusal_probability == 0.7
    assert given.calibration().judge == big.calibration().judge
    # a --model file is no preset and takes the default model's gates
    other = Settings.load({"model": "/x/m.gguf", "llm": "qwen2.5-coder-1.5b"}, {})
    assert other.llm_preset() is None and other.llm_path() == Path("/x/m.gguf")
    assert other.calibration() == PRESETS["qwen2.5-coder-0.5b"].calibration


@pytest.mark.parametrize(
    ("cli", "env", "fragment"),
    [
        ({"port": "http"}, {}, "port: expected int"),
        ({}, {"EDGERAG_PORT": "99999"}, "port must be"),
        ({}, {"EDGERAG_NO_LLM": "maybe"}, "EDGERAG_NO_LLM: expected a boolean"),
        ({"quant": "q8"}, {}, "quant must be"),
        ({"llm": "qwen2.5-coder-7b"}, {}, "llm must be one of qwen2.5-coder-0.5b"),
        ({"max_tokens": "5000"}, {}, "max_tokens"),
    ],
)
def test_bad_values_name_the_option(
    cli: dict[str, str], env: dict[str, str], fragment: str
) -> None:
    with pytest.raises(SettingsError, match=fragment):
        Settings.load(cli, env)
