"""The notebook's tables. Every change here needs a migration in migrations/versions/."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Entry(Base):
    """A dated markdown note. kind="week" is the weekly letter, one per ISO week."""

    __tablename__ = "entry"
    __table_args__ = (
        # One letter per ISO week; ordinary entries may share a week freely.
        sa.Index("ix_entry_one_letter_per_week", "iso_week", unique=True,
                 sqlite_where=sa.text("kind = 'week'"),
                 postgresql_where=sa.text("kind = 'week'")),
        sa.Index("ix_entry_date", "date", "id"),
        sa.Index("ix_entry_kind_date", "kind", "date"),
        sa.CheckConstraint("kind IN ('entry', 'week')", name="ck_entry_kind"),
        sa.CheckConstraint("status IN ('draft', 'published')", name="ck_entry_status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(8), default="entry")
    date: Mapped[dt.date] = mapped_column(sa.Date)
    iso_week: Mapped[str] = mapped_column(sa.String(8), index=True)  # "2024-W13"
    title: Mapped[str] = mapped_column(sa.String(200))
    slug: Mapped[str] = mapped_column(sa.String(120))
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    body_html: Mapped[str] = mapped_column(sa.Text, default="")
    toc_html: Mapped[str] = mapped_column(sa.Text, default="")
    tags: Mapped[str] = mapped_column(sa.String(1000), default="")  # space-separated, as typed
    status: Mapped[str] = mapped_column(sa.String(10), default="published")
    revision: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    revisions: Mapped[list[Revision]] = relationship(
        back_populates="entry", cascade="all, delete-orphan", passive_deletes=True,
        order_by="Revision.number",
    )

    @property
    def tag_list(self) -> list[str]:
        return self.tags.split()


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
    source_id: Mapped[int] = mapped_column(
        sa.ForeignKey("entry.id", ondelete="CASCADE"), index=True
    )
    target_key: Mapped[str] = mapped_column(sa.String(200), index=True)
    text: Mapped[str] = mapped_column(sa.String(200))
    context: Mapped[str] = mapped_column(sa.String(400), default="")


class EntryTag(Base):
    """Tags of an entry: its tag field plus #tags in its body, normalised."""

    __tablename__ = "entry_tag"

    entry_id: Mapped[int] = mapped_column(
        sa.ForeignKey("entry.id", ondelete="CASCADE"), primary_key=True
    )
    tag: Mapped[str] = mapped_column(sa.String(100), primary_key=True, index=True)


class Attachment(Base):
    """An uploaded file, stored content-addressed under <data>/attachments/."""

    __tablename__ = "attachment"

    id: Mapped[int] = mapped_column(primary_key=True)
    entry_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("entry.id", ondelete="SET NULL"), index=True
    )
    sha256: Mapped[str] = mapped_column(sa.String(64), index=True)
    filename: Mapped[str] = mapped_column(sa.String(200))
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
