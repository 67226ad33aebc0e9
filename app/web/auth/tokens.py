"""Bearer tokens in the database: made, rotated, listed and revoked. Only a token's hash
is stored; the secret is returned once, by the call that makes it. The CLI's
`commonplace token` commands and the runner token `commonplace up` makes use these;
identity.py checks a token a request presents."""

from __future__ import annotations

import sqlalchemy as sa

from app.models import Token, utcnow
from app.web.auth.identity import hash_token, new_token


class TokenError(ValueError):
    """A name already taken, or no token by that name."""


def _named(session, name: str) -> Token | None:
    return session.scalar(sa.select(Token).where(Token.name == name))


def create(db, name: str, role: str) -> str:
    secret = new_token()
    with db.write() as session:
        if _named(session, name):
            raise TokenError(f"a token named {name!r} exists; revoke it first")
        session.add(Token(name=name, role=role, token_hash=hash_token(secret)))
    return secret


def rotate(db, name: str, role: str) -> str:
    """A fresh secret for the token called `name` (made if missing, revived if revoked):
    the previous one stops working."""
    secret = new_token()
    with db.write() as session:
        row = _named(session, name)
        if row is None:
            session.add(Token(name=name, role=role, token_hash=hash_token(secret)))
        else:
            row.role, row.token_hash, row.revoked_at = role, hash_token(secret), None
    return secret


def listing(db) -> list[str]:
    """One line a token: name, role, state, last use (tab-separated), by name."""
    lines = []
    with db.read() as session:
        for row in session.scalars(sa.select(Token).order_by(Token.name)):
            state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
            used = f"{row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never"
            lines.append(f"{row.name}\t{row.role}\t{state}\tlast used {used}")
    return lines


def revoke(db, name: str) -> None:
    with db.write() as session:
        row = _named(session, name)
        if row is None:
            raise TokenError(f"no token named {name!r}")
        row.revoked_at = row.revoked_at or utcnow()
        # Free the name for a replacement while keeping the row for the record.
        row.name = f"{name}~revoked~{row.id}"
