"""A render in two halves: the markdown work, which needs nothing of the notebook and may be
slow (`template`, run where a budget can stop it: isolated.py), and the places it leaves open
- where each wiki link goes and what each embed shows - filled in from the notebook as it
stands when the save commits (`fill`: string substitution, cheap). The HTML is exactly
what one `render` with the same resolver and embeds would give.

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


def template(body: str, embed_names: tuple[str, ...] = (),
             tag_url: Callable[[str], str] = default_tag_url) -> Template:
    from .pipeline import render

    nonce = secrets.token_hex(16)
    while nonce in body:  # practically never; but then no text can spell it
        nonce = secrets.token_hex(16)
    targets: list[str] = []
    embedded: list[tuple[str, str]] = []

    def resolve(target: str) -> Resolved:  # called once per distinct target
        targets.append(target)
        return Resolved(f"CPLINK{nonce}T{len(targets) - 1}E", True, False)

    def embed_as(name: str) -> Callable[[str], str]:
        def embed(source: str) -> str:
            embedded.append((name, source))
            return f"CPEMBED{nonce}N{len(embedded) - 1}E"
        return embed

    done = render(body, resolve_link=resolve, tag_url=tag_url,
                  embeds={name: embed_as(name) for name in embed_names})
    return Template(nonce, done.html, done.toc_html, targets, embedded, done.links, done.tags,
                    done.text, done.tasks)


def fill(tpl: Template, resolve: Mapping[str, Resolved],
         embeds: Mapping[str, Callable[[str], str]]) -> Rendered:
    """The template's HTML with every link placed (`resolve[target]`) and every embed
    rendered (`embeds[name](source)`, trusted HTML, as the pipeline inserts it)."""
    link_re = re.compile(rf'class="wikilink" href="CPLINK{tpl.nonce}T(\d+)E"')

    def link(m: re.Match[str]) -> str:
        url, exists, draft = resolve[tpl.targets[int(m.group(1))]]
        cls = "wikilink draft" if draft else "wikilink" if exists else "wikilink missing"
        return f'class="{cls}" href="{url.replace("&", "&amp;").replace(chr(34), "&quot;")}"'

    html, toc_html = tpl.html, tpl.toc_html
    if tpl.targets:
        html, toc_html = link_re.sub(link, html), link_re.sub(link, toc_html)
    if tpl.embeds:
        from .syntax import call_embed

        shown = [call_embed(embeds, name, source) for name, source in tpl.embeds]
        html = re.sub(rf"CPEMBED{tpl.nonce}N(\d+)E", lambda m: shown[int(m.group(1))], html)
    return Rendered(html, toc_html, tpl.links, tpl.tags, tpl.text, tpl.tasks)
