"""The half of a bulk import that runs in worker processes: reading files and rendering
markdown, the CPU-bound part, with nothing of the database.

A note is rendered once, through the one pipeline (app/notebook/render), with every wiki
link pointing at a placeholder; `place_links` then writes each link's real address and
class in, as resolved against the notebook when the note's batch commits (and again when
a later batch brings an entry it links to). Placeholders carry a secret per-import nonce,
so no note's text can spell one. A note whose text has an embed (```` ```run ````) or
embeds a note or file (`![[…]]`) is rendered as a save renders it, to a
render.template.Template with its links, embeds and embedded notes left open (the
attachments it names found in the import's index): the writer fills them in under the
write lock (saving.place), string work, so no markdown is rendered while it holds it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from app.notebook.addresses import tag_url
from app.notebook.attachments import Index
from app.notebook.entry_rows import EntryRow
from app.notebook.link_index import Known
from app.notebook.mirror import Parsed, parse_file, to_text
from app.notebook.render import Resolved, WikiLink, render
from app.notebook.render.template import Template as Open
from app.notebook.render.template import template as open_template


@dataclass
class Template:
    html: str  # links as placeholders: class="wikilink" href="CPLINK<nonce>T<i>E"
    toc_html: str
    targets: list[str]  # placeholder i is a link to targets[i]
    links: list[WikiLink]
    tags: list[str]
    text: str


ATTACHMENTS: list[Index | None] = [None]  # the import's files (use_attachments)


def use_attachments(found: Index) -> None:
    """The attachments this process's renders find ![[name]] among (an import's)."""
    ATTACHMENTS[0] = found


def _attachment_url(name: str) -> str | None:
    return ATTACHMENTS[0].url(name) if ATTACHMENTS[0] is not None else None


@dataclass
class Failed:
    """A note the pipeline could not render, and why."""

    reason: str


def read(path: Path, root: Path | None = None) -> Parsed | str:
    """A parsed file, or the reason it cannot be imported (as the per-file import said)."""
    try:
        return parse_file(path, follow_symlinks=False, root=root)
    except (OSError, ValueError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        return f"{path}: {exc or type(exc).__name__}"


def template(job: tuple[str, str, tuple[str, ...]]) -> Template | Open | Failed | None:
    """The note rendered with placeholder links; an Open template if it has an embed or
    embeds a note or file; None if the importer must render it (its text spells the
    nonce); Failed if it cannot be rendered at all, which fails that note alone."""
    try:
        return _template(*job)
    except Exception as exc:  # a hostile text fails its own file, never the import
        return Failed(f"{type(exc).__name__}: {str(exc)[:200]}".rstrip(": "))


def _template(body: str, nonce: str, embed_names: tuple[str, ...]) -> Template | Open | None:
    if nonce in body:
        return None  # (never, in practice) rendered by the importer with the real resolver
    if "![[" in body:
        return _open(body, embed_names)
    targets: list[str] = []
    embedded: list[str] = []

    def resolve(target: str) -> Resolved:  # called once per distinct target
        targets.append(target)
        return Resolved(f"CPLINK{nonce}T{len(targets) - 1}E", True, False)

    def embed(source: str) -> str:
        embedded.append(source)
        return ""

    done = render(body, resolve_link=resolve, tag_url=tag_url,
                  embeds=dict.fromkeys(embed_names, embed), resolve_attachment=_attachment_url)
    if embedded:
        return _open(body, embed_names)
    return Template(done.html, done.toc_html, targets, done.links, done.tags, done.text)


def _open(body: str, embed_names: tuple[str, ...]) -> Open:
    """The note as a save renders it (saving.render): once, and again handed the
    attachments the first render asked for."""
    tpl = open_template(body, embed_names, tag_url)
    if tpl.unknown:
        files = {name: _attachment_url(name) for name in tpl.unknown}
        tpl = open_template(body, embed_names, tag_url, files=files)
    return tpl


def placeholder_re(nonce: str) -> re.Pattern[str]:
    # a heading or block link keeps its "#fragment" after the placeholder
    return re.compile(rf'class="wikilink" href="CPLINK{nonce}T(\d+)E([^"]*)"')


def place_links(found: re.Pattern[str], tpl: Template,
                resolve: Callable[[str], Resolved]) -> tuple[str, str]:
    """The template's HTML and table of contents with every link resolved."""
    if not tpl.targets:
        return tpl.html, tpl.toc_html
    resolved = [resolve(target) for target in tpl.targets]

    def one(m: re.Match[str]) -> str:
        url, exists, *draft = resolved[int(m.group(1))]
        cls = ("wikilink draft" if draft and draft[0] else
               "wikilink" if exists else "wikilink missing")
        href = url.replace("&", "&amp;").replace(chr(34), "&quot;") + m.group(2)
        return f'class="{cls}" href="{href}"'

    return found.sub(one, tpl.html), found.sub(one, tpl.toc_html)


def templates(jobs: list) -> list[tuple[Template | Failed | None, str | None]]:
    """A worker's task: render notes, and write out their mirror files' text."""
    return [(template(job), None) if isinstance(job[0], str) else
            (template(job[0]), to_text(_as_entry(*job[1]))) for job in jobs]


def _as_entry(known: Known, body: str) -> EntryRow:
    """What mirror.relpath and to_text read of an entry, built in the renderers for every
    file (an ORM Entry, instrumented, costs more than the row). They read neither timestamp,
    which is not known here."""
    return EntryRow(known.id, known.kind, known.date, known.iso_week, known.title,  # type: ignore[arg-type]
                    known.slug, known.tags, "", known.status, known.revision, None, None, body,  # type: ignore[arg-type]
                    publish=known.publish, front_matter=known.extra)
