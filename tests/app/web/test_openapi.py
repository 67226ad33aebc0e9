"""The OpenAPI document is valid and names every /api/v1 route the app serves."""

import re


def test_document_is_valid_openapi(client):
    # Imported here: every xdist worker imports every test module to collect it.
    from openapi_spec_validator import validate

    validate(client.get("/api/v1/openapi.json").get_json())


def test_every_api_route_is_documented(app, client):
    documented = client.get("/api/v1/openapi.json").get_json()["paths"]
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/") or rule.rule == "/api/v1/openapi.json":
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        assert path in documented, f"{path} is served but not in openapi.json"
        methods = rule.methods - {"HEAD", "OPTIONS"}
        missing = {m.lower() for m in methods} - set(documented[path])
        assert not missing, f"{path}: {missing} not documented"
