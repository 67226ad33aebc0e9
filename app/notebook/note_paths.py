"""How Obsidian reaches a note by a [[link]]: by its file's path inside the vault, case
aside, written as short as it can be while it stays unique. `[[Note]]` reaches the file
named Note.md, `[[Folder/Note]]` the one whose path ends so; among several, the one with
the shortest path. entries.resolve (the database), link_index (an import, in memory) and
browse.reached_by (backlinks) all choose with `best`, so the three agree.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from pathlib import Path

from app.models import link_key


def in_folder(path: Path, root: Path) -> str:
    """A file's path inside an imported folder, as the notebook keeps it (source_path, an
    attachment's path): composed (NFC), as Obsidian names its files, so a macOS folder's
    decomposed "Café.md" is the note [[Café]] reaches and that a later import finds again."""
    return unicodedata.normalize("NFC", path.relative_to(root).as_posix())


def path_key(source_path: str) -> str:
    """'Folder/My Note.md' -> 'folder/my note': what a link spelling the path matches."""
    path = source_path[:-3] if source_path.lower().endswith(".md") else source_path
    return link_key(path)


def page_of(target: str) -> str:
    """The page a link names: [[Note#Heading]] and [[Note#^block]] name Note (the renderer
    places the fragment); [[#Heading]] names none (this page)."""
    return target.split("#", 1)[0].strip()


def target_key(target: str) -> str:
    """A link's page part as a path key: [[Note.md]] and [[/Folder/Note]] read as Obsidian
    reads them."""
    return path_key(target.strip().lstrip("/"))


def name_of(key: str) -> str:
    """The file name part of a path key: what Entry.name_key indexes."""
    return key.rsplit("/", 1)[-1]


def suffix_keys(key: str) -> list[str]:
    """Every way a link may spell the path: 'a/b/note' -> note, b/note, a/b/note."""
    parts = key.split("/")
    return ["/".join(parts[i:]) for i in range(len(parts) - 1, -1, -1)]


def reaches(key: str, candidate: str) -> bool:
    return candidate == key or candidate.endswith("/" + key)


def best(key: str, candidates: Iterable[tuple[str, int]]):
    """Of (path key, order) pairs, the order of the one [[key]] reaches, else None: the
    shortest path (fewest folders, then fewest characters, then by name), then the oldest."""
    found = [(c.count("/"), len(c), c, order) for c, order in candidates if reaches(key, c)]
    return min(found)[3] if found else None
