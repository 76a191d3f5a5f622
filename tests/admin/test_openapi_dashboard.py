"""The OpenAPI document is valid and matches the routes; the dashboard is served safely."""

from __future__ import annotations

import re
from pathlib import Path

from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from modelgate.admin.api import AdminAPI
from tests.admin.conftest import Admin
from tests.admin.screenshots import NAMES


def test_openapi_document_is_valid_and_public(admin: Admin) -> None:
    response = admin.client.get("/admin/api/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    document = response.json()
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_openapi_paths_are_exactly_the_served_routes(admin: Admin) -> None:
    document = admin.client.get("/admin/api/openapi.json").json()
    served = {route.path for route in AdminAPI(admin.gateway.services).routes()} - {
        "/admin/api/openapi.json",
        "/admin/api/{rest:path}",
    }
    assert set(document["paths"]) == served
    for path, item in document["paths"].items():
        concrete = (
            path.replace("{account_id}", "1")
            .replace("{key_id}", "key_x")
            .replace("{token_id}", "tok_x")
            .replace("{person_id}", "person_x")
            .replace("{invite_id}", "inv_x")
        )
        for method in item:
            answer = admin.client.request(method.upper(), concrete)
            if item[method].get("security") == []:
                # A public operation (single sign-on's): served, whatever it answers here.
                assert answer.status_code != 405 and "no admin endpoint" not in answer.text, (method, path)
            else:
                # Every documented operation exists (401 without a token, not 404/405).
                assert answer.status_code == 401, (method, path)
            for status in item[method]["responses"]:
                assert re.fullmatch(r"[2-4]\d\d", status)


def test_documented_request_schemas_refuse_unknown_fields(admin: Admin) -> None:
    schemas = admin.client.get("/admin/api/openapi.json").json()["components"]["schemas"]
    for name in [
        "AccountCreate",
        "TopUp",
        "KeyCreate",
        "KeyUpdate",
        "KeyRotate",
        "Empty",
        "AccountTokenCreate",
        "TokenCreate",
    ]:
        assert schemas[name]["additionalProperties"] is False, name


def _scripts(admin: Admin) -> dict[str, str]:
    """Every module the page loads, followed from app.js through its imports."""
    found: dict[str, str] = {}
    todo = ["app.js"]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        response = admin.client.get(f"/dashboard/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith("text/javascript")
        found[name] = response.text
        todo += re.findall(r'from "\./([a-z-]+\.js)"', response.text)
    return found


def test_dashboard_is_served_with_a_strict_csp_and_holds_no_secrets(admin: Admin) -> None:
    tenant = admin.tenant()
    client = admin.client
    for path in ["/dashboard", "/dashboard/"]:
        page = client.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
    html = client.get("/dashboard").text
    # No inline script or style (the CSP would block them anyway), no event-handler attributes.
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="/dashboard/app.js">']
    assert "<style" not in html and not re.search(r"\son[a-z]+=", html) and "style=" not in html
    scripts = _scripts(admin)
    assert {"app.js", "api.js", "dom.js", "chart.js", "dialogs.js"} <= set(scripts)
    for name in scripts:
        assert client.get(f"/dashboard/{name}").headers["content-security-policy"] == csp
    assert client.get("/dashboard/app.css").headers["content-type"].startswith("text/css")
    for missing in [
        "/dashboard/secret",
        "/dashboard/..%2Fkeys.py",
        "/dashboard/__init__.py",
        "/dashboard/APP.JS",
    ]:
        assert client.get(missing).status_code == 404, missing
    # Nothing served carries a secret, and no script builds markup from strings or uses the
    # browser's own prompt/confirm/alert boxes (the page has its own dialogs).
    for asset in ["/dashboard", "/dashboard/app.css", *(f"/dashboard/{name}" for name in scripts)]:
        body = client.get(asset).text
        assert "sk-cs4-" not in body.replace("sk-cs4-…", "") and "mg-op-" not in body.replace("mg-op-…", "")
        assert tenant.key.secret not in body and tenant.admin.token not in body
    for name, script in scripts.items():
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ]:
            assert sink not in script, (name, sink)
        for native in ["prompt(", "confirm(", "alert("]:
            assert f"window.{native}" not in script and not re.search(
                rf"(?<![\w.]){re.escape(native)}", script
            ), (
                name,
                native,
            )
        assert "localStorage" not in script and "token=" not in script, name
    # The token is kept per tab and sent as a header, never in a URL.
    assert "sessionStorage" in scripts["api.js"] and '"Bearer " +' in scripts["api.js"]


def test_dashboard_calls_only_documented_endpoints(admin: Admin) -> None:
    paths = set(admin.client.get("/admin/api/openapi.json").json()["paths"])
    used: set[str] = set()
    for script in _scripts(admin).values():
        used |= set(re.findall(r'api\("(?:GET|POST|PATCH)", ["`](/[a-z-]+(?:/[a-z.-]+)?)', script))
        used |= set(re.findall(r'download\("(/[a-z./-]+)"', script))
    assert {
        "/keys",
        "/usage/records",
        "/usage/records.csv",
        "/usage/daily",
        "/usage/top-keys",
        "/tokens",
    } <= used
    for call in used:
        assert any(p == "/admin/api" + call or p.startswith("/admin/api" + call + "/") for p in paths), call


def test_real_responses_match_their_documented_schemas(admin: Admin) -> None:
    """Each documented 200 of the read endpoints validates (JSON Schema 2020-12) against its schema."""
    document = admin.client.get("/admin/api/openapi.json").json()
    tenant = admin.tenant()
    admin.chat(tenant.key.secret)
    issued = admin.operator.ok(
        "POST", "/tokens", {"account_id": tenant.account.id, "name": "schema"}, status=201
    )
    key = tenant.key.record.id
    calls = {
        "/admin/api/me": "/me",
        "/admin/api/accounts": "/accounts?q=tenant",
        "/admin/api/keys": f"/keys?account_id={tenant.account.id}",
        "/admin/api/keys/{key_id}": f"/keys/{key}",
        "/admin/api/tokens": "/tokens",
        "/admin/api/models": "/models",
        "/admin/api/usage": f"/usage?key_id={key}",
        "/admin/api/usage/records": f"/usage/records?account_id={tenant.account.id}",
        "/admin/api/usage/daily": f"/usage/daily?account_id={tenant.account.id}",
        "/admin/api/usage/top-keys": "/usage/top-keys",
    }
    for path, call in calls.items():
        schema = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        validator = Draft202012Validator({**schema, "components": document["components"]})
        body = admin.operator.ok("GET", call)
        assert body, call
        errors = [e.message for e in validator.iter_errors(body)]
        assert errors == [], (path, errors)
    token_schema = {"$ref": "#/components/schemas/TokenWithSecret", "components": document["components"]}
    assert list(Draft202012Validator(token_schema).iter_errors(issued)) == []


def test_the_docs_show_every_view_in_a_screenshot() -> None:
    """docs/dashboard.md shows each screenshot `make screenshots` takes, and each file is a PNG."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    text = (docs / "dashboard.md").read_text("utf-8")
    # The single sign-on shots are taken by tests/admin/test_sso_browser.py (a real provider).
    sso_shots = {"sso-sign-in", "sso-signed-in", "people"}
    assert set(re.findall(r"\]\(screenshots/([a-z-]+)\.png\)", text)) == set(NAMES) | sso_shots
    for name in [*NAMES, *sso_shots]:
        head = (docs / "screenshots" / f"{name}.png").read_bytes()[:24]
        width = int.from_bytes(head[16:20], "big")
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and width >= 390, name
    # Every view of the dashboard is in one: a new view comes with its screenshot.
    app = (docs.parent / "src" / "modelgate" / "dashboard" / "app.js").read_text("utf-8")
    declared = re.search(r"const VIEWS = \{([^}]*)\}", app)
    assert declared is not None
    views = [v.strip() for v in declared[1].split(",") if v.strip()]
    shot_of = {"members": "people", "audit": "history"}  # the others are named after their view
    shown = set(NAMES) | sso_shots
    missing = [v for v in views if not any(n.startswith(shot_of.get(v, v)) for n in shown)]
    assert len(views) >= 8 and missing == [], missing
