"""The suite's own order (tests/conftest.py): a module named in LONGEST_FIRST that was
moved or renamed would silently lose its place at the front and could finish last again."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST
from tests.helpers import ROOT


def test_every_module_listed_first_exists():
    assert [path for path in LONGEST_FIRST if not (ROOT / path).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_longest_modules_are_collected_first(request):
    collected = list(dict.fromkeys(item.nodeid.split("::", 1)[0]
                                   for item in request.session.items))
    listed = [path for path in collected if path in LONGEST_FIRST]
    assert collected[:len(listed)] == listed
    assert listed == [path for path in LONGEST_FIRST if path in listed]
