"""The notebook's tables: entry, revision, link, entry_alias, entry_tag, attachment, token,
setting, idempotency_key."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship, validates

from app.models.base import Base, link_key, utcnow


class Entry(Base):
    """A dated markdown note. kind="week" is the weekly letter, one per ISO week."""

    __tablename__ = "entry"
    __table_args__ = (
        # One letter per ISO week; ordinary entries may share a week freely. On PostgreSQL
        # the same partial index comes from the migration (0001): naming a postgresql_*
        # option here would load SQLAlchemy's whole PostgreSQL dialect into every process,
        # a SQLite web worker included (docs/PERFORMANCE.md, *Imports a worker never needs*).
        sa.Index("ix_entry_one_letter_per_week", "iso_week", unique=True,
                 sqlite_where=sa.text("kind = 'week'")),
        sa.Index("ix_entry_date", "date", "id"),
        sa.Index("ix_entry_kind_date", "kind", "date"),
        # the drafts alone (few): published counts are all counts less theirs (0010)
        sa.Index("ix_entry_draft_week", "iso_week", sqlite_where=sa.text("status = 'draft'")),
        # a [[Title]] link's target, newest first (entries.resolve; 0011, 0012)
        sa.Index("ix_entry_title_key", "title_key", "date"),
        # an imported file's entry, found again by its path on the next import (0013)
        sa.Index("ix_entry_source_path", "source_path", unique=True),
        # a [[Folder/Note]] link's candidates: the entries whose file is named Note (0013)
        sa.Index("ix_entry_name_key", "name_key"),
        sa.CheckConstraint("kind IN ('entry', 'week')", name="ck_entry_kind"),
        sa.CheckConstraint("status IN ('draft', 'published')", name="ck_entry_status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(8), default="entry")
    date: Mapped[dt.date] = mapped_column(sa.Date)
    iso_week: Mapped[str] = mapped_column(sa.String(8), index=True)  # "2024-W13"
    title: Mapped[str] = mapped_column(sa.String(200))
    # link_key(title), set with the title: what a [[link]] to it is matched on (0012)
    title_key: Mapped[str] = mapped_column(sa.String(200), default="", server_default="")
    slug: Mapped[str] = mapped_column(sa.String(120))
    # the file it was imported from, its path in that folder ("Folder/Note.md"): its identity
    source_path: Mapped[str | None] = mapped_column(sa.String(1000))
    # link_key of that file's name without ".md": what a [[Note]] link matches first
    name_key: Mapped[str | None] = mapped_column(sa.String(200))
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    # an imported file's front matter keys that no field holds, as YAML; written back in
    # its file (mirror.to_text), shown nowhere else (0017)
    front_matter: Mapped[str | None] = mapped_column(sa.Text)
    body_html: Mapped[str] = mapped_column(sa.Text, default="")
    toc_html: Mapped[str] = mapped_column(sa.Text, default="")
    tags: Mapped[str] = mapped_column(sa.String(1000), default="")  # space-separated, as typed
    # the #tags of its text not in `tags`, set with each render, shown with them (0013)
    body_tags: Mapped[str] = mapped_column(sa.String(1000), default="", server_default="")
    status: Mapped[str] = mapped_column(sa.String(10), default="published")
    # `publish: true`: the entry goes on the public site (app/publishing); off by default
    # (no Python-side default: db.insert_many's rows, e.g. a bulk import's, need not name it)
    publish: Mapped[bool] = mapped_column(server_default=sa.false())
    revision: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    revisions: Mapped[list[Revision]] = relationship(
        back_populates="entry", cascade="all, delete-orphan", passive_deletes=True,
        order_by="Revision.number",
    )

    @validates("title")
    def _keep_title_key(self, _name: str, title: str) -> str:
        self.title_key = link_key(title)
        return title

    @property
    def tag_list(self) -> list[str]:  # the tags field (what a save changes)
        return self.tags.split()

    @property
    def all_tags(self) -> list[str]:  # as pages, the API and the feed show them
        return all_tags(self.tags, self.body_tags)


def all_tags(tags: str, body_tags: str) -> list[str]:
    return list(dict.fromkeys(tags.split() + body_tags.split()))


class Revision(Base):
    """Every save of every entry, full text: history, diff and restore read from here."""

    __tablename__ = "revision"
    __table_args__ = (sa.UniqueConstraint("entry_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"))
    number: Mapped[int]
    date: Mapped[dt.date] = mapped_column(sa.Date)
    title: Mapped[str] = mapped_column(sa.String(200))
    body_md: Mapped[str] = mapped_column(sa.Text)
    tags: Mapped[str] = mapped_column(sa.String(1000), default="")
    status: Mapped[str] = mapped_column(sa.String(10))
    publish: Mapped[bool] = mapped_column(server_default=sa.false())
    author: Mapped[str] = mapped_column(sa.String(200))
    note: Mapped[str] = mapped_column(sa.String(200), default="")  # "restored from 3", "import"
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    entry: Mapped[Entry] = relationship(back_populates="revisions")


class Link(Base):
    """A [[wiki link]] from one entry to a target key (lower-cased title, ISO week or date).

    Targets are matched by key when backlinks are read, so a link written before its
    target exists starts working the moment the target is created.
    """

    __tablename__ = "link"

    id: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"),
                                           index=True)
    target_key: Mapped[str] = mapped_column(sa.String(200), index=True)
    text: Mapped[str] = mapped_column(sa.String(200))
    context: Mapped[str] = mapped_column(sa.String(400), default="")


class EntryAlias(Base):
    """Another name (a link key) an imported note answers [[links]] to: `aliases:`."""

    __tablename__ = "entry_alias"

    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"),
                                          primary_key=True)
    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True, index=True)


class EntryTag(Base):
    """Tags of an entry: its tag field plus #tags in its body, normalised."""

    __tablename__ = "entry_tag"

    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"),
                                          primary_key=True)
    tag: Mapped[str] = mapped_column(sa.String(100), primary_key=True, index=True)


class Attachment(Base):
    """An uploaded file, stored content-addressed under <data>/attachments/."""

    __tablename__ = "attachment"
    __table_args__ = (sa.Index("ix_attachment_path", "path", unique=True),)

    id: Mapped[int] = mapped_column(primary_key=True)
    entry_id: Mapped[int | None] = mapped_column(sa.ForeignKey("entry.id", ondelete="SET NULL"),
                                                 index=True)
    sha256: Mapped[str] = mapped_column(sa.String(64), index=True)
    filename: Mapped[str] = mapped_column(sa.String(200))
    # an imported file's path in its folder, and its name lowered: what ![[x.png]] finds
    path: Mapped[str | None] = mapped_column(sa.String(1000))
    name_key: Mapped[str | None] = mapped_column(sa.String(200), index=True)
    content_type: Mapped[str] = mapped_column(sa.String(100))
    size: Mapped[int]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Token(Base):
    """A bearer token for the CLI, feed readers and (later) runners. Only the hash is kept."""

    __tablename__ = "token"
    __table_args__ = (
        sa.CheckConstraint("role IN ('owner', 'viewer', 'runner', 'feed')", name="ck_token_role"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100), unique=True)
    role: Mapped[str] = mapped_column(sa.String(10))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[dt.datetime | None]
    revoked_at: Mapped[dt.datetime | None]


class Setting(Base):
    """Small editable settings, e.g. the weekly letter template."""

    __tablename__ = "setting"

    key: Mapped[str] = mapped_column(sa.String(100), primary_key=True)
    value: Mapped[str] = mapped_column(sa.Text)


class IdempotencyKey(Base):
    """A client's Idempotency-Key on POST /api/v1/entries and the entry that request made.
    A retry with the same key (the answer was lost on the way, an offline queue sends
    again) gets that entry back instead of a second copy."""

    __tablename__ = "idempotency_key"

    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(64))  # sha256 of the request's JSON
    entry_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("entry.id", ondelete="SET NULL")  # deleted since: a replay says so
    )
    author: Mapped[str] = mapped_column(sa.String(200))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
