"""API tokens: made and revoked with the CLI and stored hashed; a bearer token works from
any peer; each role reaches only its part (runner tokens the runner API, feed tokens the
feed, and never from a URL anything more)."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa

from app import cli
from app.models import Entry, Token
from tests.helpers import AS_OWNER, AS_VIEWER, OWNER, TAILNET_PEER, add_token, bearer, count


def test_tokens_through_the_cli_hashed_named_revocable(served, data_dir, monkeypatch):
    """`commonplace token create/list/revoke` against the same database the app uses."""
    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    monkeypatch.setenv("COMMONPLACE_TIMEZONE", "UTC")
    runner = served.app.test_cli_runner()
    created = runner.invoke(cli.main, ["token", "create", "laptop-cli", "--role", "owner"])
    assert created.exit_code == 0, created.output
    secret = created.output.strip().splitlines()[-1]
    assert secret.startswith("cp_") and len(secret) > 40

    with served.db.read() as session:
        row = session.scalar(sa.select(Token).where(Token.name == "laptop-cli"))
        assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest()
        assert row.last_used_at is None
    assert secret.encode() not in (data_dir / "commonplace.db").read_bytes()

    client = served.client
    r = client.post("/api/v1/entries", json={"title": "by token"}, headers=bearer(secret),
                    environ_base=TAILNET_PEER)  # a token works from any peer
    assert r.status_code == 201 and r.get_json()["id"]
    listed = runner.invoke(cli.main, ["token", "list"]).output
    assert "laptop-cli\towner\tactive\tlast used 2" in listed  # a date, not "never"

    assert runner.invoke(cli.main, ["token", "revoke", "laptop-cli"]).exit_code == 0
    r = client.get("/api/v1/entries", headers=bearer(secret), environ_base=TAILNET_PEER)
    assert r.status_code == 401
    assert "revoked" in runner.invoke(cli.main, ["token", "list"]).output


def test_the_cli_refuses_a_taken_name_and_an_unknown_one_and_changes_nothing(
        served, data_dir, monkeypatch):
    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    monkeypatch.setenv("COMMONPLACE_TIMEZONE", "UTC")
    runner = served.app.test_cli_runner()
    assert runner.invoke(cli.main, ["token", "create", "phone"]).exit_code == 0
    with served.db.read() as session:
        before = session.scalar(sa.select(Token).where(Token.name == "phone")).token_hash
    again = runner.invoke(cli.main, ["token", "create", "phone", "--role", "viewer"])
    assert again.exit_code == 1 and "a token named 'phone' exists" in again.output
    unknown = runner.invoke(cli.main, ["token", "revoke", "tablet"])
    assert unknown.exit_code == 1 and "no token named 'tablet'" in unknown.output
    with served.db.read() as session:
        rows = session.execute(sa.select(Token.name, Token.role, Token.token_hash,
                                          Token.revoked_at)).all()
    assert rows == [("phone", "owner", before, None)]


@pytest.mark.parametrize("header", ["Bearer ", "Bearer nope", "Basic b3duZXI6cHc=", "Token x",
                                    "bearer " + "x" * 500])
def test_bad_authorization_is_401_and_changes_nothing(served, header):
    r = served.client.post("/api/v1/entries", json={"title": "x"},
                                  headers={**AS_OWNER, "Authorization": header})
    assert r.status_code == 401 and count(served.db, Entry) == 0


def test_viewer_token_reads_only(served):
    secret = add_token(served.db, "reader", "viewer")
    client = served.client
    assert client.get("/api/v1/entries", headers=bearer(secret)).status_code == 200
    r = client.post("/api/v1/entries", json={"title": "x"}, headers=bearer(secret))
    assert r.status_code == 403 and count(served.db, Entry) == 0


def test_tokens_feed_and_revocation(served):
    db = served.db
    owner_secret = add_token(db, "cli", "owner")
    feed_secret = add_token(db, "reader", "feed")
    client = served.client
    remote = {"REMOTE_ADDR": "100.64.0.9"}  # a token works from anywhere
    owner = bearer(owner_secret)
    r = client.post("/api/v1/entries", json={"title": "by token", "status": "published"},
                    headers=owner, environ_base=remote)
    assert r.status_code == 201
    r = client.get("/api/v1/entries", headers=bearer("nope"))
    assert r.status_code == 401
    # a feed token opens the feed and nothing else
    assert client.get(f"/feed.atom?token={feed_secret}", environ_base=remote).status_code == 200
    assert client.get(f"/api/v1/entries?token={feed_secret}",
                      environ_base=remote).status_code == 403
    assert client.get("/feed.atom?token=wrong", environ_base=remote).status_code == 403
    with db.write() as session:
        session.scalar(sa.select(Token).where(Token.name == "cli")).revoked_at = \
            sa.func.current_timestamp()
    assert client.get("/api/v1/entries", headers=owner, environ_base=remote).status_code == 401


# -- roles --------------------------------------------------------------------------------


@pytest.fixture
def with_runner_route(served):
    """A route in the runner blueprint's namespace (endpoint "runner.*"), whatever views
    that blueprint has today; request.blueprint is what the policy reads."""
    served.app.add_url_rule("/api/v1/runner/__probe", endpoint="runner.auth_probe",
                        view_func=lambda: {"ok": True}, methods=["GET", "POST"])
    return served


@pytest.mark.parametrize("role, runner_api, elsewhere", [
    ("runner", 200, 403), ("owner", 200, 200), ("viewer", 403, 200), ("feed", 403, 403),
])
def test_token_roles_and_the_runner_api(with_runner_route, role, runner_api, elsewhere):
    secret = add_token(with_runner_route.db, f"t-{role}", role)
    client = with_runner_route.client
    headers = bearer(secret)
    assert client.post("/api/v1/runner/__probe", headers=headers).status_code == runner_api
    assert client.get("/api/v1/entries", headers=headers).status_code == elsewhere
    assert client.get("/", headers=headers).status_code == elsewhere


def test_tailnet_viewer_cannot_use_the_runner_api(with_runner_route):
    client = with_runner_route.client
    assert client.get("/api/v1/runner/__probe", headers=AS_VIEWER).status_code == 403
    assert client.get("/api/v1/runner/__probe", headers=AS_OWNER).status_code == 200


def test_feed_tokens_open_the_feed_only(make_app):
    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER], FEED_TOKEN="static-feed-secret")
    db = app.extensions["db"]
    feed_secret, owner_secret = add_token(db, "reader", "feed"), add_token(db, "cli", "owner")
    client = app.test_client()
    peer = {"environ_base": TAILNET_PEER}
    assert client.get(f"/feed.atom?token={feed_secret}", **peer).status_code == 200
    assert client.get("/feed.atom?token=static-feed-secret", **peer).status_code == 200
    assert client.get("/feed.atom", headers=bearer(feed_secret), **peer).status_code == 200
    # an owner token is a header-only credential: never accepted from a URL
    assert client.get(f"/feed.atom?token={owner_secret}", **peer).status_code == 403
    assert client.get(f"/api/v1/entries?token={feed_secret}", **peer).status_code == 403
    assert client.get(f"/?token={feed_secret}", **peer).status_code == 403
    assert client.get("/feed.atom?token=wrong", **peer).status_code == 403
