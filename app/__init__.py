"""Commonplace: a personal notebook and experiment journal. `create_app` builds the web app."""

from __future__ import annotations

from pathlib import Path

from flask import Flask

ROOT = Path(__file__).resolve().parent.parent


def create_app(config: dict | None = None) -> Flask:
    app = Flask(__name__, template_folder=str(ROOT / "templates"))
    from app.config import from_environment

    app.config.update(from_environment())
    app.config.update(config or {})
    Path(app.config["DATA_DIR"]).mkdir(parents=True, exist_ok=True)

    from app import auth, db, errors

    db.init_app(app)
    auth.init_app(app)
    errors.init_app(app)

    from app.api import bp as api_bp
    from app.experiments import bp as experiments_bp
    from app.notes import bp as notes_bp
    from app.runner_api import bp as runner_bp

    app.register_blueprint(notes_bp)
    app.register_blueprint(experiments_bp)
    app.register_blueprint(api_bp)
    app.register_blueprint(runner_bp)
    return app
