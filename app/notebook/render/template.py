"""A render in two halves: the markdown work, which needs nothing of the notebook and may be
slow (`template`, run where a budget can stop it: isolated.py), and the places it leaves open
- where each wiki link goes, what each embed shows and whether an embedded note (`![[Note]]`)
is shown or only linked - filled in from the notebook as it stands when the save commits
(`fill`: string substitution, cheap). Attachments are not left open (whether one exists
decides what the markdown becomes): the render is handed them, `files`, found beforehand;
those it asked for and was not handed are in `unknown`. The HTML is exactly what one
`render` with the same resolver, embeds and attachments would give.

Placeholders carry a secret per-render nonce, so no note's text can spell one.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .rendered import Rendered, Resolved, WikiLink, default_tag_url


@dataclass
class Template:
    nonce: str
    html: str  # links as class="wikilink" href="CPLINK<nonce>T<i>E", embeds as CPEMBED<nonce>N<i>E
    toc_html: str
    targets: list[str]  # link placeholder i goes to targets[i]
    embeds: list[tuple[str, str]]  # embed placeholder i is (name, source)
    links: list[WikiLink]
    tags: list[str]
    text: str
    tasks: list[bool]
    # embedded note i: (page, fragment, its link's HTML), placeholder CPNOTE<nonce>P<i>E if
    # it was a paragraph of its own, else CPNOTE<nonce>N<i>E
    notes: list[tuple[str, str | None, str]]
    files: dict[str, str | None]  # the attachments the render used: name → URL or None
    unknown: list[str]  # names it asked for and was not handed (rendered as missing)


def template(body: str, embed_names: tuple[str, ...] = (),
             tag_url: Callable[[str], str] = default_tag_url,
             files: Mapping[str, str | None] | None = None) -> Template:
    from .pipeline import render

    nonce = secrets.token_hex(16)
    while nonce in body:  # practically never; but then no text can spell it
        nonce = secrets.token_hex(16)
    targets: list[str] = []
    embedded: list[tuple[str, str]] = []
    notes: list[tuple[str, str | None, str]] = []
    used: dict[str, str | None] = {}
    unknown: list[str] = []
    given = files or {}

    def resolve(target: str) -> Resolved:  # called once per distinct target
        targets.append(target)
        return Resolved(f"CPLINK{nonce}T{len(targets) - 1}E", True, False)

    def embed_as(name: str) -> Callable[[str], str]:
        def embed(source: str) -> str:
            embedded.append((name, source))
            return f"CPEMBED{nonce}N{len(embedded) - 1}E"
        return embed

    def attachment(name: str) -> str | None:
        if name not in given:
            unknown.append(name)
            return None
        used[name] = given[name]
        return given[name]

    def defer_note(page: str, fragment: str | None, link: str) -> Callable[[bool], str]:
        notes.append((page, fragment, link))
        index = len(notes) - 1
        return lambda alone: f"CPNOTE{nonce}{'P' if alone else 'N'}{index}E"

    done = render(body, resolve_link=resolve, tag_url=tag_url,
                  embeds={name: embed_as(name) for name in embed_names},
                  resolve_attachment=attachment, defer_note=defer_note)
    return Template(nonce, done.html, done.toc_html, targets, embedded, done.links, done.tags,
                    done.text, done.tasks, notes, used, list(dict.fromkeys(unknown)))


def fill(tpl: Template, resolve: Mapping[str, Resolved],
         embeds: Mapping[str, Callable[[str], str]],
         embed_note: Callable[[str, str | None], str | None] | None = None) -> Rendered:
    """The template's HTML with every link placed (`resolve[target]`), every embed
    rendered (`embeds[name](source)`, trusted HTML, as the pipeline inserts it) and every
    embedded note shown (`embed_note(page, fragment)`, as pipeline.render takes it)."""
    # a heading or block link keeps its "#fragment" after the placeholder
    link_re = re.compile(rf'class="wikilink" href="CPLINK{tpl.nonce}T(\d+)E([^"]*)"')

    def link(m: re.Match[str]) -> str:
        url, exists, draft = resolve[tpl.targets[int(m.group(1))]]
        cls = "wikilink draft" if draft else "wikilink" if exists else "wikilink missing"
        url = url.replace("&", "&amp;").replace(chr(34), "&quot;")
        return f'class="{cls}" href="{url}{m.group(2)}"'

    html, toc_html = tpl.html, tpl.toc_html
    if tpl.notes:  # first: a note shown or not brings its link, placed below
        html = _show_notes(tpl, html, embed_note)
    if tpl.targets:
        html, toc_html = link_re.sub(link, html), link_re.sub(link, toc_html)
    if tpl.embeds:
        from .syntax import call_embed

        shown = [call_embed(embeds, name, source) for name, source in tpl.embeds]
        html = re.sub(rf"CPEMBED{tpl.nonce}N(\d+)E", lambda m: shown[int(m.group(1))], html)
    return Rendered(html, toc_html, tpl.links, tpl.tags, tpl.text, tpl.tasks)


def _show_notes(tpl: Template, html: str,
                embed_note: Callable[[str, str | None], str | None] | None) -> str:
    """What wikilinks.EmbedProcessor would have made of each embedded note: the note
    framed under its link, or (no such note or part, a draft) the link alone, in a
    paragraph of its own where the embed stood alone."""
    from .sanitize import make_cleaner
    from .transclusion import frame

    clean = make_cleaner(tpl.nonce)
    shown = []
    for page, fragment, link in tpl.notes:
        body = embed_note(page, fragment) if embed_note is not None else None
        shown.append((clean(frame(link, body)), True) if body is not None
                     else (clean(link), False))

    def place(m: re.Match[str]) -> str:
        done, framed = shown[int(m.group(2))]
        return f"<p>{done}</p>" if m.group(1) == "P" and not framed else done

    return re.sub(rf"CPNOTE{tpl.nonce}([PN])(\d+)E", place, html)
