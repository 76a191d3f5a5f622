"""The OpenAPI document is valid and matches the routes; the dashboard is served safely."""

from __future__ import annotations

import re

import httpx
from openapi_spec_validator import validate

from modelgate.admin.api import AdminAPI
from tests.admin.conftest import Admin


def test_openapi_document_is_valid_and_public(admin: Admin) -> None:
    response = admin.client.get("/admin/api/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    document = response.json()
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_openapi_paths_are_exactly_the_served_routes(admin: Admin) -> None:
    document = admin.client.get("/admin/api/openapi.json").json()
    served = {
        route.path  # type: ignore[attr-defined]
        for route in AdminAPI(admin.gateway.services).routes()
    } - {"/admin/api/openapi.json", "/admin/api/{rest:path}"}
    assert set(document["paths"]) == served
    for path, item in document["paths"].items():
        concrete = (
            path.replace("{account_id}", "1").replace("{key_id}", "key_x").replace("{token_id}", "tok_x")
        )
        for method in item:
            # Every documented operation exists (401 without a token, not 404/405).
            assert admin.client.request(method.upper(), concrete).status_code == 401, (method, path)
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
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/dashboard/app.js" defer>']
    assert "<style" not in html and not re.search(r"\son[a-z]+=", html) and "style=" not in html
    js = client.get("/dashboard/app.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert js.headers["content-security-policy"]
    assert client.get("/dashboard/app.css").headers["content-type"].startswith("text/css")
    assert client.get("/dashboard/secret").status_code == 404
    assert client.get("/dashboard/..%2Fkeys.py").status_code == 404
    # Nothing served carries a secret, and the script never builds markup from strings.
    for asset in ["/dashboard", "/dashboard/app.js", "/dashboard/app.css"]:
        body = client.get(asset).text
        assert "sk-cs4-" not in body and "mg-op-" not in body.replace("mg-op-… or", "")
        assert tenant.key.secret not in body and tenant.admin.token not in body
    script = js.text
    for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"]:
        assert sink not in script, sink
    # The token is kept per tab and sent as a header, never in a URL.
    assert "sessionStorage" in script and "localStorage" not in script
    assert '"Bearer " +' in script and "token=" not in script


def test_dashboard_calls_only_documented_endpoints(admin: Admin) -> None:
    paths = set(admin.client.get("/admin/api/openapi.json").json()["paths"])
    script = httpx.get(f"{admin.gateway.base_url}/dashboard/app.js").text
    used = set(re.findall(r'api\("(?:GET|POST|PATCH)", "(/[a-z]+)', script))
    assert used and all(any(p.startswith("/admin/api" + u) for p in paths) for u in used)
