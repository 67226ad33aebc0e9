"""The public site: `commonplace publish` writes the entries marked `publish: true` as
plain files any static host serves (docs/PUBLISHING.md has the privacy rules).

A layer beside the web: it reads the notebook and the journal's card rendering, and the
web does not depend on it (pyproject's import-linter contracts).

    selection.py    which entries are public, and where each public thing lives
    public_html.py  an entry's stored HTML as the public site shows it
    feed.py         the Atom feed, with absolute links
    site.py         every file of the site, in memory
    command.py      `commonplace publish` itself
    output.py       the folder: only what changed is written, what is gone is removed
    preview.py      the folder served on loopback
"""
