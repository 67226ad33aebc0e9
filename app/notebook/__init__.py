"""The notebook: dated markdown entries and weekly letters, their history, links, tags,
search, attachments and the plain-markdown mirror. Knows nothing of runs or of HTTP.

    entries.py      THE rules of a save (validate, revision, render, index, mirror)
    saving.py       a save rendered before the write lock, committed under it
    letters.py      the weekly letter and its template
    isoweeks.py     ISO week arithmetic ("2024-W13")
    browse.py       read-only queries the pages share (history, backlinks, prev/next, tags)
    search.py       the query language → FTS5, bm25 ranking (ranking.py)
    search_index.py the index's tables, kept in step with every save
    mirror.py       every entry as <data>/notes/YYYY/….md, written after commit
    transfer.py     import and export of whole folders of markdown
    attachments.py  uploaded files, stored by content hash
    atom.py         the Atom feed document
    embeds.py       fenced blocks rendered by code registered from above (```run)
    render/         the one markdown pipeline (pure: its dependencies are passed in)

Functions take an open session and never commit: the caller owns the transaction.
"""
