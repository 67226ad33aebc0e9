"""Names Windows can create, in an export, and the links that reach them.

Windows keeps the names of its devices (CON, PRN, AUX, NUL, COM1-9, LPT1-9) whatever
follows a dot: no file or folder may be so named there. An export (vault.py) writes a note
or an attachment so named with "_" after the name ("CON_.md", "aux_.png"), and a folder
ending in a dot or a space without them. Each [[link]] or ![[embed]] of an exported note
that names such a file is made to name the file written (`[[CON]]` is `[[CON_|CON]]`, so
it still reads "CON"), and the note's front matter lists each link rewritten, as the file
has it and as the notebook does (`commonplace-links`): reading the note back
(mirror.parse_file) restores exactly those, so an export imported into the notebook it
came from changes nothing, text for text.
"""

from __future__ import annotations

import re

KEY = "commonplace-links"  # the front matter's list of rewritten links

# What Windows keeps for its devices, whatever follows a dot ("CON.md" is CON, as is
# "aux.txt.md"): no file or folder may be so named there.
_DEVICE_RE = re.compile(r"(?i)(?:con|prn|aux|nul|com[1-9]|lpt[1-9]) *(?:\..*)?")
# A wiki link or an embed as Obsidian writes it (render/wikilinks.py's WIKILINK_RE, which
# loads Python-Markdown with it): the target, then what it shows after a "|".
_LINK_RE = re.compile(r"(!?)\[\[([^\[\]|\n]+)(?:\|([^\[\]\n]*))?\]\]")


def windows_safe(path: str) -> str:
    """A path as Windows can create it: a part named as a device gets "_" after its name
    ("CON_.md"), a folder ending in a dot or a space loses them (a file name ends in its
    extension). A note's title stays in its front matter, so it imports as the same note."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if i < len(parts) - 1:
            part = part.rstrip(". ") or "_"
        if _DEVICE_RE.fullmatch(part):
            name, dot, rest = part.partition(".")
            part = f"{name.rstrip()}_{dot}{rest}"
        parts[i] = part
    return "/".join(parts)


def _reaching(m: re.Match[str]) -> str:
    """The link `m` as it reaches the file an export wrote for its target."""
    page, hashed, fragment = m[2].partition("#")
    if not page.strip() or "" in page.strip().split("/"):
        return m[0]  # this note's heading, or no path a file was written at
    safe = windows_safe(page.strip())
    if safe == page.strip():
        return m[0]
    target = f"{safe}{hashed}{fragment}"
    if m[3] is not None:  # an embed's size, or what a link shows
        return f"{m[1]}[[{target}|{m[3]}]]"
    return f"![[{target}]]" if m[1] else f"[[{target}|{m[2]}]]"  # a link shows its own


def to_vault(body: str) -> tuple[str, dict[str, str]]:
    """`body` with each link to a renamed file made to reach it, and those rewritten: the
    link in the file -> the link in the notebook. A link that could not be told back from
    one the note already holds (or from another rewritten alike) is left as it is."""
    if "[[" not in body:
        return body, {}
    held = {m[0] for m in _LINK_RE.finditer(body)}
    rewritten: dict[str, str] = {}

    def rewrite(m: re.Match[str]) -> str:
        link = _reaching(m)
        if link == m[0] or link in held or rewritten.get(link, m[0]) != m[0]:
            return m[0]
        rewritten[link] = m[0]
        return link

    return _LINK_RE.sub(rewrite, body), rewritten


def from_vault(body: str, rewritten) -> str:
    """A note's text read from a folder, the links its front matter lists (`rewritten`, as
    to_vault made it; anything else there is not the export's, and is ignored) as the
    notebook had them."""
    if not isinstance(rewritten, dict) or "[[" not in body:
        return body
    pairs = {k: v for k, v in rewritten.items() if isinstance(k, str) and isinstance(v, str)
             and _LINK_RE.fullmatch(k) and _LINK_RE.fullmatch(v)}
    return _LINK_RE.sub(lambda m: pairs.get(m[0], m[0]), body) if pairs else body
