"""The tables, one module per side: base.py (what every table shares), notebook.py (entry,
revision, link, entry_alias, entry_tag, attachment, token, setting, idempotency_key) and
journal.py (runner, schedule, run and what a run keeps, judgement). Importing this package
puts every table in Base.metadata; every change to one needs a migration in
migrations/versions/."""

from app.models.base import Base, link_key, utcnow
from app.models.journal import (
    Judgement,
    Metric,
    Run,
    RunArtifact,
    RunEvent,
    RunMetric,
    Runner,
    RunNode,
    RunParam,
    Schedule,
)
from app.models.notebook import (
    Attachment,
    Entry,
    EntryAlias,
    EntryTag,
    IdempotencyKey,
    Link,
    Revision,
    Setting,
    Token,
    all_tags,
)

__all__ = [
    "Attachment", "Base", "Entry", "EntryAlias", "EntryTag", "IdempotencyKey", "Judgement",
    "Link", "Metric", "Revision", "Run", "RunArtifact", "RunEvent", "RunMetric", "RunNode",
    "RunParam", "Runner", "Schedule", "Setting", "Token", "all_tags", "link_key", "utcnow",
]
