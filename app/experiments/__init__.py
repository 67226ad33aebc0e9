"""The experiment journal's pages: catalogue, new-run form, runs, compare, schedules."""

from flask import Blueprint

bp = Blueprint("experiments", __name__)

from app.experiments import schedule_pages, views  # noqa: E402,F401  (routes register on bp)
