// modelgate dashboard: sign-in, the view router and the scope (one account, or all of them for an
// operator). Plain DOM and ES modules, no dependencies, no HTML strings: every value from the
// server is inserted as text (see dom.js). Routes live in the URL fragment (#/keys?account=2), so
// back/forward and bookmarks work and nothing secret is ever in a URL.

import { ApiError, api, forget, ssoSession, ssoSignOut, ssoStatus, token } from "./api.js";
import { closeAll, onUnauthorized, wireDialogs } from "./dialogs.js";
import { $ } from "./dom.js";
import * as accounts from "./view-accounts.js";
import * as audit from "./view-audit.js";
import * as keys from "./view-keys.js";
import * as members from "./view-members.js";
import * as overview from "./view-overview.js";
import * as tokens from "./view-tokens.js";
import * as upstreams from "./view-upstreams.js";
import * as usage from "./view-usage.js";

const VIEWS = { overview, keys, usage, accounts, tokens, members, audit, upstreams };
const OPERATOR_ONLY = new Set(["accounts", "upstreams"]);
// `shown`: the view and account last shown; a message belongs to the view it was said in.
const session = { me: null, person: null, render: 0, shown: "" };

function say(message, isError) {
  $("status").textContent = message || "";
  $("status").className = "status" + (isError ? " error" : "");
}

function fail(err) {
  if (err instanceof ApiError && err.status === 401) {
    signOut("Signed out: " + err.message, true);
    return;
  }
  say(err && err.message ? err.message : String(err), true);
}

function route() {
  const [path, params] = (location.hash.replace(/^#\/?/, "") || "overview").split("?");
  const search = new URLSearchParams(params || "");
  const raw = search.get("account");
  return { view: path in VIEWS ? path : "overview", account: raw && /^[0-9]{1,18}$/.test(raw) ? Number(raw) : null, search };
}

// Where a link goes, keeping the operator's account scope unless told otherwise.
function href(view, accountId, extra) {
  const params = new URLSearchParams(extra || {});
  if (accountId !== null && accountId !== undefined) params.set("account", String(accountId));
  const q = params.toString();
  return "#/" + view + (q ? "?" + q : "");
}

async function accountName(id) {
  const a = await api("GET", "/accounts/" + id);
  return a.name;
}

async function show() {
  if (!session.me) return;
  const operator = session.me.scope === "operator";
  let { view, account, search } = route();
  if (!operator) account = session.me.account.id;
  if (!operator && OPERATOR_ONLY.has(view)) view = "overview";
  if (session.me.role === "member" && (view === "tokens" || view === "audit")) view = "overview";
  // Another view (or another account's): the last view's message goes with it.
  const shown = `${view}|${account}`;
  if (shown !== session.shown) say("");
  session.shown = shown;
  const ticket = ++session.render;
  const stale = () => ticket !== session.render || !session.me;

  for (const name of Object.keys(VIEWS)) $("view-" + name).hidden = name !== view;
  for (const a of $("nav").querySelectorAll("a")) {
    a.href = href(a.dataset.view, operator && !OPERATOR_ONLY.has(a.dataset.view) ? account : null);
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.body.classList.toggle("scoped", account !== null);
  document.body.dataset.view = view;
  document.body.dataset.ready = "";

  const scope = { id: account, name: operator ? null : session.me.account.name };
  if (operator && account !== null) scope.name = await accountName(account);
  if (stale()) return;
  $("scope").hidden = false;
  $("scope-label").textContent =
    account === null ? "All accounts" : `Account: ${scope.name} (#${account})`;
  $("scope-back").hidden = !operator || account === null;

  const ctx = {
    me: session.me,
    operator,
    scope,
    search,
    stale,
    say,
    fail,
    href,
    nowMs: Date.parse(session.me.now),
    go: (target) => {
      location.hash = target;
    },
    refresh: () => show().catch(fail),
  };
  await VIEWS[view].render(ctx);
  if (!stale()) document.body.dataset.ready = view;
}

async function signIn(value) {
  token.set(value);
  try {
    session.me = await api("GET", "/me");
  } catch (err) {
    token.clear();
    throw err;
  }
  await enter();
}

// A person signed in with single sign-on (the session cookie), if there is one.
async function resume() {
  const found = await ssoSession();
  if (!found) return false;
  session.me = await api("GET", "/me");
  session.person = found.person;
  await enter();
  return true;
}

async function enter() {
  const operator = session.me.scope === "operator";
  document.body.classList.toggle("operator", operator);
  for (const node of document.querySelectorAll("[data-operator]")) node.hidden = !operator;
  // A member (single sign-on) manages only their own keys: no admin tokens, no history (audit log, ledger, statements).
  for (const node of document.querySelectorAll("[data-owner]")) node.hidden = session.me.role === "member";
  const where = operator ? "Operator" : "Account " + session.me.account.name;
  $("who").textContent = session.person ? `${session.me.actor} · ${where}` : where;
  $("signin").hidden = true;
  $("nav").hidden = false;
  $("signout").hidden = false;
  say("");
  await show();
}

// Everything the page held for the last session goes: token, dialogs, form contents, tables.
function signOut(message, isError, keepRoute) {
  if (session.person) ssoSignOut().catch(() => {});
  token.clear();
  forget();
  session.me = null;
  session.person = null;
  session.shown = "";
  session.render++;
  closeAll();
  for (const form of document.querySelectorAll("main form")) form.reset();
  for (const view of Object.values(VIEWS)) view.reset();
  for (const name of Object.keys(VIEWS)) $("view-" + name).hidden = true;
  for (const tbody of document.querySelectorAll("main tbody")) tbody.replaceChildren();
  for (const node of document.querySelectorAll("[data-operator]")) node.hidden = true;
  document.body.classList.remove("operator", "scoped");
  document.body.dataset.view = "";
  document.body.dataset.ready = "signin";
  $("scope").hidden = true;
  $("nav").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin").hidden = false;
  if (!keepRoute && location.hash) history.replaceState(null, "", location.pathname);
  say(message || "", isError);
  $("token").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  wireDialogs();
  onUnauthorized((err) => signOut("Signed out: " + err.message, true));
  for (const view of Object.values(VIEWS)) view.wire({ fail, say, refresh: () => show().catch(fail) });
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    $("token").value = "";
    signIn(value).catch((err) => say("Sign-in failed: " + (err && err.message ? err.message : err), true));
  });
  $("signout").addEventListener("click", () => signOut("Signed out."));
  window.addEventListener("hashchange", () => show().catch(fail));
  ssoStatus().then((sso) => {
    $("sso").hidden = !sso.enabled;
    if (sso.login_url) $("sso-link").href = sso.login_url;
  });
  const saved = token.get();
  if (saved) signIn(saved).catch((err) => signOut("Sign-in failed: " + err.message, true));
  else
    resume()
      .then((entered) => entered || signOut("", false, true))
      .catch((err) => signOut("Sign-in failed: " + err.message, true));
});
