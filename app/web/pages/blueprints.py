"""The two blueprints of the HTML pages: "notes" (the notebook) and "experiments" (the
journal: catalogue, runs, schedules). Defined apart from their views so every page module
imports this one leaf, and the package's __init__ imports the views."""

from flask import Blueprint

notes = Blueprint("notes", __name__)
experiments = Blueprint("experiments", __name__)
