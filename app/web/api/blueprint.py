"""The JSON API's blueprint, apart from its views so they import this leaf."""

from flask import Blueprint

bp = Blueprint("api", __name__, url_prefix="/api/v1")
