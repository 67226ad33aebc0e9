"""Sizes on the run page are in the units the result cards use: kB of 1,000 bytes."""

from app.journal import run_files, runs
from app.models import Run
from tests.helpers import queue


def test_the_log_size_is_in_the_kilobytes_the_cards_use(app, client, db):
    """The run page gave a 2,500-byte log as "2.4 kB" (KiB, labelled kB) beside cards that
    write kB as 1,000 bytes."""
    run_id = queue(db, steps=1)
    with db.write() as session:
        run = session.get(Run, run_id)
        runs.transition(session, run, runs.LEASED, actor="runner:gpu-1", reason="leased")
        runs.transition(session, run, runs.RUNNING, actor="runner:gpu-1")
        run_files.append_log(app.config["DATA_DIR"], session, run, 0, "x" * 2499 + "\n")
    text = client.get(f"/runs/{run_id}").text
    assert 'id="log-size">2.5 kB' in text, text
