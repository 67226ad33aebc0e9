"""What each kind of page weighs on the wire, compressed, against its budget: home, the
letter and an experiment's page at most 30 KB, a run page 60 KB, no page over 100 KB. With
realistic content: a week of notes, real finished runs (tests/real_runs.py: a ZeRO run
comparing its strategies, a pipeline and a data-parallel run) whose cards the letter
holds.

Run with -s to see the table (docs/PERFORMANCE.md, *Over the wire*)."""

from __future__ import annotations

import gzip

import brotli
import pytest

from app.journal import posting
from app.notebook.isoweeks import iso_week, today
from tests.helpers import create_entry
from tests.real_runs import lab_output, store_run

KB = 1000
BUDGETS = {"home": 30 * KB, "letter": 30 * KB, "experiment": 30 * KB, "run": 60 * KB}
ANY_PAGE = 100 * KB
NOTE = "\n\n".join([
    "## What I tried\n\nThe 1F1B schedule against GPipe with **8 micro-batches**: the bubble "
    "fell from 27% to 11%, as the model says, but the step time moved less than that.",
    "- stage 0 waits on the first backward\n- stage 3 holds 4 activations, not 8\n"
    "- [ ] measure with bigger hidden sizes",
    "```python\nfor step in range(steps):\n    loss = model(batch).sum()\n    loss.backward()\n```",
    "See [[Pipeline notes]] and #parallelism for the rest; $t = (p - 1)/(m + p - 1)$.",
])


@pytest.fixture
def notebook(app, client, tmp_path_factory):
    """A week of notes and three real runs carded into the letter: (client, page paths)."""
    runs = {name: store_run(app, name, lab_output(tmp_path_factory, name))
            for name in ("zero", "pipeline", "data_parallel")}
    assert sorted(posting.post_cards(app.extensions["db"], "UTC")) == sorted(runs.values())
    for n in range(12):
        entry = create_entry(client, title=f"Pipeline notes {n}", body=NOTE,
                             tags="parallelism lab")
    week = iso_week(today("UTC"))
    pages = {"home": "/", "letter": f"/weeks/{week}", "run": f"/runs/{runs['zero']}",
             "entry": f"/entries/{entry}", "calculator": "/calculator",
             "search": "/search?q=pipeline", "sitemap": "/sitemap", "runs": "/runs",
             "experiments": "/experiments", "experiment": "/experiments/zero",
             "tag": "/tags/parallelism",
             "pipeline run": f"/runs/{runs['pipeline']}"}
    return client, pages


def test_every_page_kind_is_within_its_budget_compressed(notebook):
    client, pages = notebook
    rows, over = [], []
    for kind, path in pages.items():
        plain = client.get(path, follow_redirects=True)
        assert plain.status_code == 200, path
        sent = {}
        for coding, unpack in (("br", brotli.decompress), ("gzip", gzip.decompress)):
            response = client.get(path, follow_redirects=True,
                                  headers={"Accept-Encoding": coding})
            assert response.headers["Content-Encoding"] == coding, path
            assert unpack(response.get_data()) == plain.get_data()
            sent[coding] = len(response.get_data())
        budget = BUDGETS.get(kind.split()[-1], ANY_PAGE)
        rows.append(f"{kind:<13} {len(plain.get_data()):>9,} {sent['gzip']:>9,} "
                    f"{sent['br']:>9,} {budget:>9,}")
        if max(sent.values()) > budget:
            over.append(f"{kind} ({path}): {sent} > {budget}")
    print("\npage            as is B    gzip B  brotli B  budget B\n" + "\n".join(rows))
    assert not over, over
