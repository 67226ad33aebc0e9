"""The app's upload links in a vault, and back.

The editor links an upload by its address, `![name.png](/attachments/<sha256>/name.png)`,
which means nothing outside the app. An export (vault.py) writes each upload as a file at
`attachments/<sha256>/name.png` and each such link as an ordinary markdown link to that
file, relative to the note (`![name.png](../attachments/<sha256>/name.png)` from a note one
folder down), which Obsidian, GitHub and any editor show. Reading a note back
(mirror.parse_file) turns exactly those links into the address again, so an export
imported into the notebook it came from changes nothing, text for text. The folder named
by the content's hash is what tells such a link from one its owner wrote: no other path
can be read as one.
"""

from __future__ import annotations

import re

FOLDER = "attachments"
# A name the app writes (attachments.safe_filename's letters): one a file may have anywhere.
_NAME = r"[A-Za-z0-9._-]+"
_ADDRESS_RE = re.compile(rf"(!?)\[([^\]\n]*)\]\(/attachments/([0-9a-f]{{64}})/({_NAME})\)")
_IN_VAULT_RE = re.compile(
    rf"(!?)\[([^\]\n]*)\]\(((?:\.\./)*){FOLDER}/([0-9a-f]{{64}})/({_NAME})\)")
HASH_FOLDER_RE = re.compile(rf"{FOLDER}/([0-9a-f]{{64}})/{_NAME}")


def path(sha256: str, name: str) -> str:
    """Where an export writes the upload `name` of that content."""
    return f"{FOLDER}/{sha256}/{name}"


def linked(text: str) -> set[tuple[str, str]]:
    """The uploads a note's text links by address: (sha256, name)."""
    if "/attachments/" not in text:
        return set()
    return {(m[3], m[4]) for m in _ADDRESS_RE.finditer(text)}


def to_vault(text: str, written: set[tuple[str, str]], up: int) -> str:
    """`text` with each link to an upload in `written` (exported at `path`) made a link to
    its file, from a note `up` folders down."""
    if "/attachments/" not in text:
        return text

    def relative(m: re.Match[str]) -> str:
        if (m[3], m[4]) not in written:
            return m[0]
        return f"{m[1]}[{m[2]}]({'../' * up}{path(m[3], m[4])})"

    return _ADDRESS_RE.sub(relative, text)


def from_vault(body: str, source: str) -> str:
    """A note's text read from a folder, its links to an exported upload (relative to the
    note at `source`, its path in the folder) made the app's address again."""
    if f"{FOLDER}/" not in body:
        return body
    up = source.count("/")

    def address(m: re.Match[str]) -> str:
        if len(m[3]) != 3 * up:  # climbs to another folder than the top: not the export's
            return m[0]
        return f"{m[1]}[{m[2]}](/attachments/{m[4]}/{m[5]})"

    return _IN_VAULT_RE.sub(address, body)
