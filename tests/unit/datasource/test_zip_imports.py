"""zip_imports: invalidate_caches re-reads a zip archive only when it changed (Rule 1), and imports from a
replaced archive still find its new modules."""

import importlib
import os
import sys
import zipfile
import zipimport

import pytest

from sparklog.datasource import zip_imports


@pytest.fixture
def archive_on_path(tmp_path):
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("sparklog_zip_probe_a.py", "VALUE = 1\n")
    sys.path.insert(0, str(archive))
    try:
        yield archive
    finally:
        sys.path.remove(str(archive))
        sys.path_importer_cache.pop(str(archive), None)
        for name in ("sparklog_zip_probe_a", "sparklog_zip_probe_b"):
            sys.modules.pop(name, None)


def test_an_unchanged_archive_is_not_read_again(archive_on_path, monkeypatch):
    zip_imports.install()
    zip_imports.install()  # idempotent: one wrapper
    assert importlib.import_module("sparklog_zip_probe_a").VALUE == 1
    reads = []
    real = zipimport._read_directory
    monkeypatch.setattr(zipimport, "_read_directory", lambda path: reads.append(path) or real(path))
    importlib.invalidate_caches()  # the first one per importer reads (no stamp yet)
    before = reads.count(str(archive_on_path))
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert before <= 1 and reads.count(str(archive_on_path)) == before


def test_a_replaced_archive_is_read_again_and_its_new_modules_import(archive_on_path):
    zip_imports.install()
    assert importlib.import_module("sparklog_zip_probe_a").VALUE == 1
    importlib.invalidate_caches()
    with zipfile.ZipFile(archive_on_path, "w") as zf:  # as addPyFile replacing the file in place
        zf.writestr("sparklog_zip_probe_a.py", "VALUE = 1\n")
        zf.writestr("sparklog_zip_probe_b.py", "VALUE = 2\n")
    stat = os.stat(archive_on_path)
    os.utime(archive_on_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    importlib.invalidate_caches()
    assert importlib.import_module("sparklog_zip_probe_b").VALUE == 2
