"""Shared by every test and doctest (tests/, and the doctests in tuckerkit/, cli/ and datasets/)."""

from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_under_pytest(tmp_path_factory):
    """Files made through ``tempfile`` (the doctests' ``mkdtemp()``, tests that need a folder for a whole
    module) go under pytest's own temporary folder, which pytest removes with its older runs; a run of the
    suite had left 14 folders and files loose in /tmp."""
    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("tempfile"))
    yield
    tempfile.tempdir = before
