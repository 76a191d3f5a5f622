// modelgate dashboard: plain DOM, no dependencies, no HTML strings. Every value from the server is
// inserted with textContent/value, so names and ids can never become markup. The admin token lives
// in sessionStorage (this tab only) and goes to /admin/api as Authorization: Bearer, never in a URL.
"use strict";

const TOKEN_KEY = "modelgate.adminToken";
const API = "/admin/api";
const state = { me: null, accountId: null, usage: null, editing: null };

const $ = (id) => document.getElementById(id);

function el(tag, text, props) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  Object.assign(node, props || {});
  return node;
}

function button(label, onClick) {
  const b = el("button", label, { type: "button" });
  b.addEventListener("click", () => run(onClick));
  return b;
}

function row(cells) {
  const tr = el("tr");
  for (const cell of cells) {
    const td = el("td");
    if (cell instanceof Node) td.append(cell);
    else if (Array.isArray(cell)) td.append(...cell);
    else td.textContent = cell === null || cell === undefined ? "" : String(cell);
    tr.append(td);
  }
  return tr;
}

function details(dl, pairs) {
  dl.replaceChildren();
  for (const [k, v] of pairs) dl.append(el("dt", k), el("dd", v));
}

function say(message, isError) {
  const s = $("status");
  s.textContent = message || "";
  s.className = isError ? "error" : "";
}

async function run(action) {
  try {
    await action();
  } catch (err) {
    if (err && err.status === 401) {
      signOut();
      say("Sign-in failed: " + err.message, true);
    } else {
      say(err && err.message ? err.message : String(err), true);
    }
  }
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) };
  const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(API + path, init);
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const err = new Error(data && data.error ? data.error.message : "HTTP " + res.status);
    err.status = res.status;
    throw err;
  }
  return data;
}

function showSecret(title, secret) {
  $("secret-title").textContent = title;
  $("secret-value").value = secret;
  $("secret-box").hidden = false;
  $("secret-value").select();
}

function hideSecret() {
  $("secret-value").value = "";
  $("secret-box").hidden = true;
}

function modelsOf(text) {
  return text.split(",").map((m) => m.trim()).filter((m) => m);
}

// --- session --------------------------------------------------------------------------------

async function signIn(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
  state.me = await api("GET", "/me");
  const operator = state.me.scope === "operator";
  $("who").textContent = operator ? "operator" : "account " + state.me.account.name;
  $("signin").hidden = true;
  $("main").hidden = false;
  $("signout").hidden = false;
  $("accounts").hidden = !operator;
  $("account-info").hidden = operator;
  $("key-account-label").hidden = !operator;
  state.accountId = operator ? null : state.me.account.id;
  state.usage = operator ? { type: "all" } : { type: "account", id: state.accountId };
  say("");
  await refresh();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  state.me = null;
  hideSecret();
  $("main").hidden = true;
  $("signout").hidden = true;
  $("signin").hidden = false;
  $("who").textContent = "";
  for (const id of ["accounts-rows", "keys-rows", "usage-rows", "usage-summary", "account-details"]) {
    $(id).replaceChildren();
  }
}

async function refresh() {
  if (state.me.scope === "operator") await loadAccounts();
  else await loadOwnAccount();
  await loadKeys();
  await loadUsage();
}

// --- accounts -------------------------------------------------------------------------------

async function loadOwnAccount() {
  const a = await api("GET", "/accounts/" + state.accountId);
  details($("account-details"), [
    ["name", a.name], ["id", a.id], ["balance", a.balance + " credits"],
    ["available", a.available + " credits"], ["reserved", a.reserved + " credits"],
  ]);
}

async function loadAccounts() {
  const list = await api("GET", "/accounts");
  const rows = list.data.map((a) => row([a.id, a.name, a.balance, a.available, [
    button("Keys", async () => { state.accountId = a.id; state.usage = { type: "account", id: a.id }; await refresh(); }),
    button("Top up", () => topUp(a)),
    button("Owner token", () => ownerToken(a)),
  ]]));
  $("accounts-rows").replaceChildren(...rows);
}

async function topUp(account) {
  const amount = window.prompt("Credits to add to " + account.name + ":", "10");
  if (!amount) return;
  const updated = await api("POST", "/accounts/" + account.id + "/topups", { amount: amount.trim() });
  say(updated.name + ": balance " + updated.balance + " credits");
  await loadAccounts();
}

async function ownerToken(account) {
  if (!window.confirm("Issue a new admin token for account " + account.name + "?")) return;
  const issued = await api("POST", "/accounts/" + account.id + "/tokens");
  showSecret("Admin token for account " + account.name, issued.token);
}

async function createAccount(event) {
  event.preventDefault();
  const body = { name: $("account-name").value.trim() };
  const credits = $("account-credits").value.trim();
  if (credits) body.credits = credits;
  const account = await api("POST", "/accounts", body);
  $("account-form").reset();
  say("created account " + account.name + " (id " + account.id + ")");
  await loadAccounts();
}

// --- keys -----------------------------------------------------------------------------------

async function loadKeys() {
  const query = state.accountId === null ? "" : "?account_id=" + encodeURIComponent(state.accountId);
  $("keys-scope").textContent = state.accountId === null ? "(all accounts)" : "(account " + state.accountId + ")";
  if (state.me.scope === "operator" && state.accountId !== null) $("key-account").value = state.accountId;
  const list = await api("GET", "/keys" + query);
  const rows = list.data.map((k) => {
    const actions = [button("Usage", async () => { state.usage = { type: "key", id: k.id }; await loadUsage(); })];
    if (k.state === "active") {
      actions.push(button("Edit", () => startEdit(k)), button("Rotate", () => rotate(k)), button("Revoke", () => revoke(k)));
    }
    const tr = row([k.id, k.name, k.group, k.display, k.state, k.rpm,
      k.allowed_models ? k.allowed_models.join(", ") : "all", k.monthly_cap === null ? "none" : k.monthly_cap,
      k.spent_this_month, actions]);
    if (k.state !== "active") tr.className = "disabled";
    return tr;
  });
  $("keys-rows").replaceChildren(...rows);
}

async function createKey(event) {
  event.preventDefault();
  const body = { group: $("key-group").value, name: $("key-name").value.trim() };
  if (state.me.scope === "operator") body.account_id = Number($("key-account").value);
  if ($("key-rpm").value) body.rpm = Number($("key-rpm").value);
  const models = modelsOf($("key-models").value);
  if (models.length) body.allowed_models = models;
  if ($("key-cap").value.trim()) body.monthly_cap = $("key-cap").value.trim();
  const key = await api("POST", "/keys", body);
  $("key-form").reset();
  showSecret("Secret of key " + key.id, key.secret);
  say("created key " + key.id);
  await loadKeys();
}

function startEdit(key) {
  state.editing = key.id;
  $("edit-id").textContent = key.id;
  $("edit-name").value = key.name;
  $("edit-rpm").value = key.rpm;
  $("edit-models").value = key.allowed_models ? key.allowed_models.join(",") : "";
  $("edit-cap").value = key.monthly_cap === null ? "" : key.monthly_cap;
  $("edit-form").hidden = false;
}

async function saveEdit(event) {
  event.preventDefault();
  const models = modelsOf($("edit-models").value);
  const cap = $("edit-cap").value.trim();
  const body = {
    name: $("edit-name").value.trim(),
    rpm: Number($("edit-rpm").value),
    allowed_models: models.length ? models : null,
    monthly_cap: cap ? cap : null,
  };
  const key = await api("PATCH", "/keys/" + encodeURIComponent(state.editing), body);
  $("edit-form").hidden = true;
  state.editing = null;
  say("updated key " + key.id);
  await loadKeys();
}

async function rotate(key) {
  const grace = window.prompt("Rotate " + key.id + ". Seconds the old secret keeps working:", "86400");
  if (grace === null) return;
  const rotated = await api("POST", "/keys/" + encodeURIComponent(key.id) + "/rotate", { grace_seconds: Number(grace) });
  showSecret("New secret of key " + rotated.id, rotated.secret);
  say("rotated key " + rotated.id);
  await loadKeys();
}

async function revoke(key) {
  if (!window.confirm("Revoke key " + key.id + " (" + key.name + ")? It stops working at once.")) return;
  await api("POST", "/keys/" + encodeURIComponent(key.id) + "/revoke");
  say("revoked key " + key.id);
  await loadKeys();
}

// --- usage ----------------------------------------------------------------------------------

async function loadUsage() {
  const month = $("usage-month").value || new Date().toISOString().slice(0, 7);
  $("usage-month").value = month;
  const params = new URLSearchParams({ month, limit: "50" });
  if (state.usage.type === "key") params.set("key_id", state.usage.id);
  if (state.usage.type === "account") params.set("account_id", String(state.usage.id));
  const u = await api("GET", "/usage?" + params.toString());
  $("usage-scope").textContent = u.scope.type === "all" ? "(everything)" : "(" + u.scope.type + " " + u.scope.id + ")";
  const s = u.summary;
  details($("usage-summary"), [
    ["month", u.month], ["requests", s.requests], ["input tokens", s.input_tokens],
    ["output tokens", s.output_tokens], ["charged", s.charged + " credits"],
    ...s.by_model.map((m) => ["  " + m.model, m.charged + " credits"]),
  ]);
  $("usage-rows").replaceChildren(...u.records.map((r) => row([
    r.created_at, r.key_id, r.endpoint, r.model, r.status, r.input_tokens, r.output_tokens, r.charged,
  ])));
}

// --- wiring ---------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    $("token").value = "";
    run(() => signIn(token));
  });
  $("signout").addEventListener("click", () => { signOut(); say("signed out"); });
  $("account-form").addEventListener("submit", (e) => run(() => createAccount(e)));
  $("key-form").addEventListener("submit", (e) => run(() => createKey(e)));
  $("edit-form").addEventListener("submit", (e) => run(() => saveEdit(e)));
  $("edit-cancel").addEventListener("click", () => { $("edit-form").hidden = true; state.editing = null; });
  $("usage-form").addEventListener("submit", (e) => { e.preventDefault(); run(loadUsage); });
  $("secret-copy").addEventListener("click", () => run(() => navigator.clipboard.writeText($("secret-value").value)));
  $("secret-done").addEventListener("click", hideSecret);
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) run(() => signIn(saved));
});
