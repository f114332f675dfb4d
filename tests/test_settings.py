from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from flask_app import settings_doc
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
    assert given.calibration().evidence_alone_words == big.calibration().evidence_alone_words
    # a --model file is no preset and takes the default model's gates
    other = Settings.load({"model": "/x/m.gguf", "llm": "qwen2.5-coder-1.5b"}, {})
    assert other.llm_preset() is None and other.llm_path() == Path("/x/m.gguf")
    assert other.calibration() == PRESETS["qwen2.5-coder-0.5b"].calibration
    # the evidence's shape is the one each preset's verifier was collected on
    assert other.calibration().evidence_alone_words == 15
    assert big.calibration().evidence_alone_words == 15


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


def test_off_is_a_value_of_every_option_that_can_be_switched_off() -> None:
    settings = Settings.load(
        {"answer_refusal_probability": "off", "max_items": "OFF"},
        {"EDGERAG_ANSWER_PROBE": "off"},
    )
    assert settings.calibration().refusal_probability is None  # never declines for it
    assert settings.item_cap() is None
    assert settings.verifier_off() and settings.verifier_threshold() is None
    given = Settings.load({"answer_probe": "0.7"}, {})
    assert not given.verifier_off() and given.verifier_threshold() == 0.7
    with pytest.raises(SettingsError, match="port: expected int"):
        Settings.load({"port": "off"}, {})


def test_the_old_numbers_for_off_still_work_with_a_deprecation_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="edgerag"):
        settings = Settings.load(
            {"answer_probe": "0", "max_items": "0", "answer_candidates": "0"},
            {"EDGERAG_ANSWER_REFUSAL_PROBABILITY": "1"},
        )
    assert settings.answer_probe == "off" and settings.max_items == "off"
    assert settings.answer_refusal_probability == "off"
    assert settings.answer_candidates is None
    assert settings.calibration().refusal_probability is None
    warned = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(warned) == 4 and any("answer_probe=off" in w for w in warned)
    # a real threshold of the same option is not touched
    assert Settings.load({"answer_probe": "0.5"}, {}).answer_probe == 0.5


def test_the_configuration_page_is_generated_from_the_settings() -> None:
    page = settings_doc.PAGE.read_text()
    assert page == settings_doc.render(page), (
        "docs/configuration.md is out of date: run `.venv/bin/python -m flask_app.settings_doc`"
    )
    for field in dataclasses.fields(Settings):
        if field.default_factory is not dataclasses.MISSING:  # machine- or user-dependent
            assert "shown" in field.metadata, f"{field.name} needs shown= for the page"
