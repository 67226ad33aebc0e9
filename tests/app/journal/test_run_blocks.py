"""The ```run block has one owner (app/journal/views/cards.py): how one is written, and which
runs a text embeds. The scheduler's card posting and the refresh of hand-written embeds
both ask it, so they agree on what counts as "already there"."""

import pytest

from app.journal import posting
from app.journal.views import cards


@pytest.mark.parametrize("text, ids", [
    ("```run\nid: 5\n```", {5}),
    ("intro\n\n```run\nid: 5\n```\n\nmore\n```run\n# a note first\n  id :  12  \n```\n", {5, 12}),
    ("```python\nid: 9\n```", set()),  # a code block that happens to say id:
    ("```run\nid: 3\n", set()),  # never closed: not a block
    ("- ran:\n  ```run\n  id: 4\n  ```\n> ~~~run\n> id: 6\n> ~~~", {4}),  # an item; a quote not
    ("```run\nname: x\n```", set()),  # a block without an id
    ("```run\n" + "\n" * 50_000 + "id: 7\n```\n", {7}),  # long, still found (and linear)
    ("```run\nid: 5\n" + "\n" * 50_000, set()),
])
def test_embedded_runs(text, ids):
    assert cards.embedded_runs(text) == ids


def test_a_card_is_not_posted_twice_into_a_letter():
    body = "## Notes\n\nhello\n\n## Experiments\n\n" + cards.block(4)
    assert posting.with_card(body, 4) == body
    assert cards.embedded_runs(posting.with_card(body, 5)) == {4, 5}
    # a run the owner embedded by hand, with a comment line, counts as there too
    by_hand = "## Experiments\n\n```run\n# the good one\nid: 8\n```"
    assert posting.with_card(by_hand, 8) == by_hand
