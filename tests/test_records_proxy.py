"""The cluster's record proxies are made from the records' own classes: a
method name they lack fails here, at once, not as a call on a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from flask_app.cluster.records import METHODS, PROXIES, RECORDS, RecordsHost, public_methods
from flask_app.store.catalog import Catalog


def test_each_proxy_has_exactly_its_records_methods() -> None:
    for kind, cls in RECORDS.items():
        proxy = PROXIES[kind]
        made = {name for name in vars(proxy) if not name.startswith("_")}
        assert made == set(public_methods(cls)) == set(METHODS[kind]), kind
    assert "add_file" in METHODS["catalog"] and "files" in METHODS["catalog"]


def test_a_misspelt_method_fails_before_any_call() -> None:
    remote = PROXIES["catalog"](actor=None, kind="catalog", options={}, timeout=1.0)
    with pytest.raises(AttributeError):
        remote.add_flie  # type: ignore[attr-defined]  # noqa: B018
    assert callable(remote.add_file)  # type: ignore[attr-defined]
    assert Catalog.add_file.__name__ == remote.add_file.__name__  # type: ignore[attr-defined]


def test_the_host_refuses_a_method_its_record_does_not_have(tmp_path: Path) -> None:
    host = RecordsHost(str(tmp_path))
    with pytest.raises(AttributeError, match="no method 'drop_everything'"):
        host.call("catalog", {}, "drop_everything", (), {})
