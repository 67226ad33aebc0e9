"""The suite's own order (tests/conftest.py): a module named in LONGEST_FIRST that was
moved or renamed would silently lose its place at the front and could finish last again."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems
from tests.helpers import ROOT


def test_every_module_listed_first_exists():
    assert [path for path in LONGEST_FIRST if not (ROOT / path).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_listed_modules_come_first_and_every_module_keeps_its_tests_in_order():
    modules = ["tests/a/test_short.py", LONGEST_FIRST[3], "tests/b/test_other.py",
               LONGEST_FIRST[0]]
    items = [SimpleNamespace(nodeid=f"{module}::test_{n}") for module in modules
             for n in range(3)]
    pytest_collection_modifyitems(items)
    assert [item.nodeid for item in items] == [
        f"{module}::test_{n}" for module in (LONGEST_FIRST[0], LONGEST_FIRST[3],
                                             "tests/a/test_short.py", "tests/b/test_other.py")
        for n in range(3)]
