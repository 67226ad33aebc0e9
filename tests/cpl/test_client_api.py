"""What the server offers the terminal client: `Idempotency-Key` on POST /api/v1/entries (a
retry gets the first request's entry, never a second one) and GET /api/v1/me (who the
server takes the caller for). Through the real app on a real SQLite file."""

from __future__ import annotations

import pytest

from app.models import Entry, IdempotencyKey
from tests.helpers import AS_OWNER, AS_VIEWER, add_token, bearer, count

NOTE = {"title": "Captured on a train", "body": "try 1F1B #pipeline", "tags": ["gpu"]}
KEY = "0b6c1d2e-3f40-4a5b-8c7d-9e0f1a2b3c4d"


def post(client, body, key=KEY, **headers):
    return client.post("/api/v1/entries", json=body,
                       headers={**({"Idempotency-Key": key} if key else {}), **headers})


def test_a_repeated_capture_gets_the_first_entry_back(client, db):
    first = post(client, NOTE)
    assert first.status_code == 201
    again = post(client, NOTE)
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert count(db, Entry) == 1 and count(db, IdempotencyKey) == 1


def test_without_a_key_every_post_is_a_new_entry(client, db):
    assert post(client, NOTE, key=None).status_code == 201
    assert post(client, NOTE, key=None).status_code == 201
    assert count(db, Entry) == 2 and count(db, IdempotencyKey) == 0


def test_the_same_key_for_another_request_is_refused(client, db):
    assert post(client, NOTE).status_code == 201
    other = post(client, {**NOTE, "body": "something else"})
    assert other.status_code == 422
    assert other.get_json()["error"]["field"] == "Idempotency-Key"
    assert count(db, Entry) == 1


@pytest.mark.parametrize("key", ["", "has space", "x" * 201, "ключ", "a/b"])
def test_a_malformed_key_is_refused_and_nothing_is_made(client, db, key):
    response = client.post("/api/v1/entries", json=NOTE, headers={"Idempotency-Key": key})
    assert response.status_code == 422, response.text
    assert count(db, Entry) == 0 and count(db, IdempotencyKey) == 0


def test_a_refused_capture_does_not_use_up_its_key(client, db):
    assert post(client, {**NOTE, "date": "2024-02-30"}).status_code == 422
    assert count(db, IdempotencyKey) == 0
    assert post(client, NOTE).status_code == 201  # the same key, now for a valid request


def test_a_replay_after_the_entry_was_deleted_does_not_bring_it_back(client, db):
    made = post(client, NOTE).get_json()
    assert client.delete(f"/api/v1/entries/{made['id']}").status_code == 204
    replay = post(client, NOTE)
    assert replay.status_code == 410
    assert replay.get_json()["error"]["code"] == "gone"
    assert count(db, Entry) == 0


def test_the_key_is_in_the_openapi_document(client):
    post_op = client.get("/api/v1/openapi.json").get_json()["paths"]["/api/v1/entries"]["post"]
    (header,) = [p for p in post_op["parameters"] if p["in"] == "header"]
    assert header["name"] == "Idempotency-Key"
    assert {"200", "201", "410"} <= set(post_op["responses"])


def test_me_in_dev_mode(client):
    assert client.get("/api/v1/me", environ_base={"REMOTE_ADDR": "127.0.0.1"}).get_json() == {
        "login": "owner@localhost", "role": "owner", "via": "dev", "name": "",
        "can_write": True}


def test_me_behind_tailscale_serve(served):
    me = served.client.get("/api/v1/me", headers=AS_VIEWER,
                           environ_base={"REMOTE_ADDR": "127.0.0.1"}).get_json()
    assert (me["login"], me["role"], me["via"], me["can_write"]) == (
        "viewer@example.com", "viewer", "serve", False)
    owner = served.client.get("/api/v1/me", headers=AS_OWNER,
                              environ_base={"REMOTE_ADDR": "127.0.0.1"}).get_json()
    assert owner["role"] == "owner"


def test_me_with_tokens(served):
    owner = add_token(served.db, "laptop", "owner")
    runner = add_token(served.db, "gpu-box", "runner")
    me = served.client.get("/api/v1/me", headers=bearer(owner)).get_json()
    assert (me["login"], me["role"], me["via"]) == ("token:laptop", "owner", "token")
    refused = served.client.get("/api/v1/me", headers=bearer(runner))
    assert refused.status_code == 403
    assert served.client.get("/api/v1/me", headers=bearer("cp_nope")).status_code == 401
