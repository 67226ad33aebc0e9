"""Placeholder pages until the notebook pages land (owned by the pages work)."""

from app.notes import bp


@bp.get("/")
def home():
    return "Commonplace"
