"""Finished runs into the weekly letter: the scheduler appends each run's card to the
Experiments section of the letter of the week it finished in, as a new revision.

The owner may be editing that letter at the same moment. The append is an ordinary save
with a base revision: if the letter moved on, we re-read it and append to the fresh text,
so the owner's words are never overwritten (and their stale save gets the merge view).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from app.journal import runs
from app.models import Entry, Run
from app.notebook.isoweeks import iso_week

# The views, trends and the notebook's saving are imported where a card is made, not here:
# a scheduler child that finds no card waiting (another posted it first) starts without them.
log = logging.getLogger(__name__)
AUTHOR = "scheduler"
SECTION_RE = re.compile(r"^##\s+Experiments\s*$", re.M | re.I)
NEXT_SECTION_RE = re.compile(r"^#{1,2}\s+\S", re.M)
# A finished run not yet in its letter. Runs that never started have nothing to report:
# cancelled before a runner took them, or a schedule fire skipped while the previous run
# was unfinished. (An EXPIRED run, which no runner took, and a fire whose parameters went
# stale are posted: the owner should see those.)
POSTABLE = sa.and_(
    Run.status.in_(runs.TERMINAL), Run.carded_entry_id.is_(None),
    sa.not_(sa.and_(Run.status.in_((runs.CANCELLED, runs.SKIPPED)), Run.started_at.is_(None))))


def with_card(body: str, run_id: int, changes_week: str | None = None) -> str:
    """`body` with the run's block at the end of its Experiments section (made if missing);
    with `changes_week`, the week's changes block opens the section (week_changes.py)."""
    from app.journal.views import cards, week_changes

    card = cards.block(run_id)
    if run_id in cards.embedded_runs(body):
        return body  # already there (a retry after a crash between save and mark)
    section = SECTION_RE.search(body)
    if section is None:
        body = f"{body.rstrip()}\n\n## Experiments".lstrip()
        section = SECTION_RE.search(body)
    if changes_week and "```changes" not in body:
        opening = week_changes.block(changes_week)
        head, rest = body[:section.end()].rstrip(), body[section.end():].lstrip("\n")
        body = f"{head}\n\n{opening}\n\n{rest}" if rest else f"{head}\n\n{opening}"
        section = SECTION_RE.search(body)
    following = NEXT_SECTION_RE.search(body, section.end())
    end = following.start() if following else len(body)
    head, tail = body[:end].rstrip(), body[end:]
    return f"{head}\n\n{card}\n\n{tail}".rstrip() if tail else f"{head}\n\n{card}"


def post_card(db, run_id: int, timezone: str, attempts: int = 5) -> int | None:
    """Append one finished run's card to its letter; returns the letter's id. The letter
    is rendered before the write lock is taken (app/notebook/saving.py)."""
    from app.journal.views import week_changes
    from app.notebook import letters, mirror, saving

    for _ in range(attempts):
        with db.read() as reader:
            run = reader.scalar(sa.select(Run).where(Run.id == run_id, POSTABLE))
            if run is None:
                return None
            finished = (run.finished_at or run.created_at).replace(tzinfo=dt.UTC)
            week = iso_week(finished.astimezone(ZoneInfo(timezone)).date())
            letter = letters.find_letter(reader, week)
            moved = week_changes.moves_the_week(reader, run, timezone)
            if letter is not None:
                prepared = saving.prepare_update(
                    reader, letter.id,
                    {"body": with_card(letter.body_md, run.id, week if moved else None)},
                    base_revision=letter.revision, note=f"run {run.id} finished: {run.status}")
                refreshes = saving.prepare_refresh(
                    reader, embedding(reader, run.id, skip=letter.id))
        if letter is None:  # made first, in a write of its own; then read again
            letters.create_letter(db, week, AUTHOR)
            continue
        try:
            with db.write() as session:
                run = session.scalar(sa.select(Run).where(Run.id == run_id, POSTABLE))
                if run is None:
                    return None
                saving.commit(session, prepared, author=AUTHOR)
                run.carded_entry_id = letter.id
                saving.commit_refresh(session, refreshes)
        except saving.Moved:
            continue  # the letter changed under us: read the fresh text and try again
        mirror.write_queued(session)
        return letter.id
    log.error("could not append run %s to its letter after %s attempts", run_id, attempts)
    return None


def embedding(session, run_id: int, skip: int | None = None) -> list[Entry]:
    """Entries that embed this run by hand, saved while it was unfinished: they show its
    final card from now on."""
    candidates = session.scalars(sa.select(Entry).where(
        Entry.body_md.contains("```run"), Entry.body_md.contains(str(run_id)),
        Entry.id != (skip or 0)))
    from app.journal.views import cards

    return [entry for entry in candidates if run_id in cards.embedded_runs(entry.body_md)]


def post_cards(db, timezone: str) -> list[int]:
    with db.read() as session:
        pending = list(session.scalars(
            sa.select(Run.id).where(POSTABLE).order_by(Run.id)))
    return [run_id for run_id in pending if post_card(db, run_id, timezone)]
