"""The storage seam holds: nothing above varstore/storage/ names a concrete storage, and storage_for
serves URLs from its scheme table (register_storage adds a storage without touching the engines)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from varstore.errors import InvalidURLError
from varstore.storage import LocalStorage, Storage, is_remote, object_store_for, register_storage, storage_for
from varstore.storage import _OPENERS  # the table itself, to restore it after the test
from varstore.storage._url_names import SCHEMES

ROOT = Path(__file__).resolve().parents[2]
CONCRETE = ("ObjectStorage", "LocalStorage", "UploadingStorage", "StagedZarrStorage")


def _sources() -> Iterator[Path]:
    for top in ("varstore", "cli"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "varstore/storage/" not in path.as_posix():
                yield path


def test_no_isinstance_of_a_concrete_storage_above_the_storage_package() -> None:
    pattern = re.compile(r"isinstance\([^)]*\b(" + "|".join(CONCRETE) + r")\b")
    found = [f"{path.relative_to(ROOT)}:{number}" for path in _sources()
             for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, f"ask the Storage / ObjectStore protocol instead: {found}"


def test_no_module_above_storage_imports_the_object_store_client_or_its_storage() -> None:
    pattern = re.compile(r"from varstore\.storage\.(object_storage|object_store|_urls|_url_names)\b")
    found = [str(path.relative_to(ROOT)) for path in _sources() if pattern.search(path.read_text())]
    assert not found, f"use varstore.storage's public names: {found}"


@pytest.fixture
def scheme_table() -> Iterator[None]:
    saved, schemes = dict(_OPENERS), dict(SCHEMES)
    yield
    _OPENERS.clear()
    _OPENERS.update(saved)
    SCHEMES.clear()
    SCHEMES.update(schemes)


def test_a_registered_scheme_is_served_by_its_opener(tmp_path: Path, scheme_table: None) -> None:
    made: list[tuple[str, Mapping[str, object] | None]] = []

    def opener(url: str, storage_options: Mapping[str, object] | None) -> Storage:
        made.append((url, storage_options))
        return LocalStorage(tmp_path)

    register_storage("VSTest", opener)
    assert is_remote("vstest://bucket/model.h5") and not is_remote("other://bucket/model.h5")
    storage, key = storage_for("vstest://bucket/model.h5", {"endpoint": "x"})
    assert isinstance(storage, LocalStorage) and key == "vstest://bucket/model.h5"
    storage, key = storage_for(Path("vstest://bucket/m.zarr"))  # as pathlib spells a URL
    assert key == "vstest://bucket/m.zarr"
    assert made == [("vstest://bucket/model.h5", {"endpoint": "x"}), ("vstest://bucket/m.zarr", None)]
    with pytest.raises(InvalidURLError, match="vstest://bucket/model.h5 is not on an object store"):
        object_store_for("vstest://bucket/model.h5")  # renames, no object-store calls


@pytest.mark.parametrize("scheme", ["file", "9p", "a b", ""])
def test_register_refuses_what_is_not_a_url_scheme(scheme: str, scheme_table: None) -> None:
    with pytest.raises(InvalidURLError):
        register_storage(scheme, lambda url, options: LocalStorage())


def test_a_local_path_is_not_on_an_object_store(tmp_path: Path) -> None:
    with pytest.raises(InvalidURLError, match="is not on an object store"):
        object_store_for(tmp_path / "model.h5")
