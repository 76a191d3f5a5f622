"""``GET /admin/api/keys`` pages by keyset (``limit``, ``after``) and searches (``q``): every key
exactly once in creation order, pages stable while keys are created, an account sees only its own."""

from __future__ import annotations

from typing import Any

from tests.admin.conftest import Admin, Caller


def all_pages(caller: Caller, path: str, limit: int) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    after = ""
    while True:
        page = caller.ok("GET", f"{path}&limit={limit}&after={after}")
        pages.append(page["data"])
        if page["next_cursor"] is None:
            return pages
        after = page["next_cursor"]


def test_an_account_pages_through_its_keys_once_each_in_creation_order(admin: Admin) -> None:
    tenant = admin.tenant()
    created = [tenant.key.record.id]
    created += [admin.gateway.key(tenant.account, "Basic", name=f"batch-{n:02}").record.id for n in range(24)]
    path = f"/keys?account_id={tenant.account.id}"
    pages = all_pages(tenant.admin, path, 10)
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [k["id"] for p in pages for k in p] == created
    # Unpaged callers get the first DEFAULT_KEYS (100): all 25 here, and no next page.
    first = tenant.admin.ok("GET", "/keys")
    assert [k["id"] for k in first["data"]] == created and first["next_cursor"] is None


def test_a_key_created_while_paging_shifts_no_page(admin: Admin) -> None:
    tenant = admin.tenant()
    for n in range(6):
        admin.gateway.key(tenant.account, "Basic", name=f"early-{n}")
    first = tenant.admin.ok("GET", "/keys?limit=4")
    late = admin.gateway.key(tenant.account, "Basic", name="late").record.id
    second = tenant.admin.ok("GET", f"/keys?limit=4&after={first['next_cursor']}")
    seen = [k["id"] for k in first["data"] + second["data"]]
    assert len(seen) == len(set(seen)) == 8 and seen[-1] == late and second["next_cursor"] is None


def test_search_by_name_id_or_prefix_in_any_case(admin: Admin) -> None:
    tenant = admin.tenant()
    wanted = admin.gateway.key(tenant.account, "Basic", name="Notebook-Runner").record
    admin.gateway.key(tenant.account, "Basic", name="agents")
    for q in ("notebook", "RUNNER", wanted.id, wanted.id.upper()):
        found = tenant.admin.ok("GET", "/keys", params={"q": q})["data"]
        assert [k["id"] for k in found] == [wanted.id]
    # LIKE's wildcards are taken literally: "%" finds the one name holding it, not every key.
    percent = admin.gateway.key(tenant.account, "Basic", name="50%-off").record
    assert [k["id"] for k in tenant.admin.ok("GET", "/keys", params={"q": "%"})["data"]] == [percent.id]
    # An account never finds another's keys, whatever it searches.
    other = admin.tenant()
    assert other.admin.ok("GET", "/keys", params={"q": "notebook"})["data"] == []


def test_bad_paging_parameters_are_400(admin: Admin) -> None:
    op = admin.operator
    for query in (
        "limit=0",
        "limit=1001",
        "limit=x",
        "after=nonsense",
        "after=1.5~bad%20id",
        "q=" + "x" * 101,
        "q=a%00b",
        "q=%0A",
    ):
        refused = op.request("GET", f"/keys?{query}")
        assert refused.status_code == 400, query
        assert refused.json()["error"]["type"] == "invalid_request_error"


def test_search_text_is_plain_text_to_the_index(admin: Admin) -> None:
    """The search's trigram index has a query language of its own (FTS5 on SQLite: quotes,
    NEAR, column filters, ``*``, ``^``); a search is plain text to it, found as written."""
    tenant = admin.tenant()
    names = ['say "hi"', "NEAR(a b)", "id:odd", "*star*", "^caret", "🙂 smile"]
    made = {name: admin.gateway.key(tenant.account, "Basic", name=name).record.id for name in names}
    for q, wanted in (
        ('"', ['say "hi"']),
        ('say "', ['say "hi"']),
        ('" OR "', []),
        ("near(a", ["NEAR(a b)"]),
        ("ID:O", ["id:odd"]),
        ("*", ["*star*"]),
        ("star*", ["*star*"]),
        ("^ca", ["^caret"]),
        ("🙂 S", ["🙂 smile"]),
        ('"' * 100, []),
    ):
        found = tenant.admin.ok("GET", "/keys", params={"q": q})["data"]
        assert [k["id"] for k in found] == [made[name] for name in wanted], q


def test_every_hostile_keys_query_of_the_fuzz_suite_is_a_page_or_a_json_4xx(admin: Admin) -> None:
    """Each hostile ``/admin/api/keys`` path of the fuzz suite, every one sent (the fuzz run draws
    a sample): a JSON 400 or a page, never a 5xx."""
    from tests.fuzz.hostile import ADMIN_PATHS

    paths = [p for p in ADMIN_PATHS if p.startswith("/admin/api/keys?")]
    assert len(paths) >= 20
    auth = {"authorization": f"Bearer {admin.operator.token}"}
    for path in paths:
        response = admin.client.get(path, headers=auth)
        assert response.status_code in (200, 400), (path, response.status_code, response.text)
        assert response.headers["content-type"] == "application/json", path
        if response.status_code == 200:
            assert isinstance(response.json()["data"], list), path
