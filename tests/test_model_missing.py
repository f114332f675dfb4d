"""A server started without its model file says which command fetches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from flask_app.services import ModelMissing, load_services
from flask_app.settings import Settings
from flask_app.store import Store


@pytest.mark.parametrize("llm", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_a_missing_preset_file_names_the_pull_that_fetches_it(tmp_path: Path, llm: str) -> None:
    settings = Settings.load(
        {"llm": llm, "model_dir": tmp_path / "models", "data_dir": tmp_path / "data"}, {}
    )
    with pytest.raises(ModelMissing, match=rf"Run `edgerag pull --llm {llm}`"):
        load_services(settings)


def test_a_missing_model_file_given_by_path_is_named_without_a_pull(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.gguf"
    settings = Settings.load({"model": missing, "data_dir": tmp_path / "data"}, {})
    with pytest.raises(ModelMissing) as caught:
        load_services(settings)
    assert str(missing) in str(caught.value) and "edgerag pull" not in str(caught.value)


def test_a_missing_model_leaves_the_data_directory_unlocked(tmp_path: Path) -> None:
    """The CLI may retry, and tests reuse the directory: the store opened
    before the models were checked is closed again."""
    settings = Settings.load({"model_dir": tmp_path / "models", "data_dir": tmp_path / "data"}, {})
    with pytest.raises(ModelMissing) as caught:  # its traceback holds the failed call's frames
        load_services(settings)
    Store(tmp_path / "data").close()  # raises DataDirLocked while the first store is open
    assert "edgerag pull" in str(caught.value)


def test_a_missing_embedding_model_given_by_path_is_named_without_a_pull(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere-embed.gguf"
    settings = Settings.load({"no_llm": True, "embed_model": missing, "data_dir": tmp_path}, {})
    with pytest.raises(ModelMissing) as caught:
        load_services(settings)
    assert str(missing) in str(caught.value) and "edgerag pull" not in str(caught.value)
