// The key holder's page (/dashboard/key): signed in with the API key itself, it shows what
// GET /v1/key says (limits, spend caps, models, expiry, address ranges, the balance unless the
// account hides it) and the key's own usage log from GET /v1/key/usage, a page at a time.
// Read-only. The key lives in sessionStorage (this tab only) and goes to /v1/key as x-api-key,
// never in a URL; values from the server go in as text only (dom.js).

import { $, cell, count, credits, el, fill, when } from "./dom.js";

const KEY = "modelgate.apiKey";
const PAGE = 25;
// `cursors[i]`: the cursor that fetched page i (null for the first).
const state = { cursors: [null], page: 0, render: 0 };

class KeyError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function get(path) {
  const headers = { "x-api-key": sessionStorage.getItem(KEY) || "" };
  const res = await fetch(path, { headers, cache: "no-store", credentials: "omit", redirect: "error" });
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new KeyError(res.status, data && data.error ? data.error.message : "HTTP " + res.status);
  return data;
}

function say(message, isError) {
  $("status").textContent = message || "";
  $("status").className = "status" + (isError ? " error" : "");
}

function card(label, value, sub) {
  const node = el("div", null, { class: "card" });
  node.append(el("div", label, { class: "label" }), el("div", value, { class: "value" }));
  if (sub) node.append(el("div", sub, { class: "sub" }));
  return node;
}

function capCard(name, w) {
  const label = name === "month" ? `Spend this month (${w.period})` : `Spend (${name})`;
  if (w.limit_uc === null) return card(label, credits(w.spent_uc) + " spent", `no cap · ${credits(w.held_uc)} held`);
  return card(
    label,
    `${credits(w.remaining_uc)} left`,
    `${credits(w.spent_uc)} of ${credits(w.limit_uc)} spent · ${credits(w.held_uc)} held · resets ${when(w.resets_at)} UTC`,
  );
}

function fact(name, value) {
  const tr = el("tr");
  tr.append(el("th", name, { scope: "row" }), cell(value));
  return tr;
}

function showKey(k) {
  $("who").textContent = `${k.name || k.id} · ${k.display}`;
  $("key-title").textContent = `Key ${k.name || k.id}`;
  const cards = Object.entries(k.caps).map(([name, w]) => capCard(name, w));
  cards.push(
    k.balance_hidden
      ? card("Account balance", "hidden", "the account does not show its balance")
      : card("Account balance", credits(k.balance.available_uc) + " available", "shared by the account's keys"),
  );
  cards.push(card("Rate limit", `${count(k.limits.rpm)} / min`, "requests per minute"));
  $("key-cards").replaceChildren(...cards);
  const limits = Object.entries(k.limits).map(([name, value]) => `${name} ${count(value)}`).join(" · ");
  $("key-facts").replaceChildren(
    fact("Key id", k.id),
    fact("Group", k.group),
    fact("Limits", limits),
    fact("Models", k.models.join(", ") || "none"),
    fact("Expires", k.expires_at ? when(k.expires_at) + " UTC" : "never"),
    fact("Allowed addresses", k.allowed_ips ? k.allowed_ips.join(", ") : "anywhere"),
    fact("Created", when(k.created_at) + " UTC"),
  );
}

function usageRow(r) {
  const tr = el("tr", null, { "data-request": r.request_id });
  tr.append(
    cell([el("span", when(r.created_at)), el("span", r.request_id, { class: "id" })]),
    cell(r.endpoint),
    cell(r.model),
    cell(r.status),
    cell(count(r.input_tokens), "num"),
    cell(count(r.output_tokens), "num"),
    cell(count(r.cache_creation_tokens + r.cache_read_tokens), "num"),
    cell(credits(r.charged_uc), "num"),
  );
  return tr;
}

async function showUsage(ticket) {
  const cursor = state.cursors[state.page];
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (cursor) q.set("cursor", cursor);
  const page = await get("/v1/key/usage?" + q.toString());
  if (ticket !== state.render) return;
  fill($("key-usage-rows"), page.data.map(usageRow), 8, "No requests recorded for this key yet.");
  state.cursors[state.page + 1] = page.next_cursor;
  $("key-page-info").textContent = `page ${state.page + 1}`;
  $("key-page-prev").disabled = state.page === 0;
  $("key-page-next").disabled = !page.next_cursor;
}

async function show() {
  const ticket = ++state.render;
  document.body.dataset.ready = "";
  const key = await get("/v1/key");
  if (ticket !== state.render) return;
  showKey(key);
  await showUsage(ticket);
  if (ticket === state.render) document.body.dataset.ready = "key";
}

function fail(err) {
  if (err instanceof KeyError && err.status === 401) signOut("Signed out: " + err.message, true);
  else say(err && err.message ? err.message : String(err), true);
}

async function signIn(value) {
  sessionStorage.setItem(KEY, value);
  state.cursors = [null];
  state.page = 0;
  try {
    await show();
  } catch (err) {
    sessionStorage.removeItem(KEY);
    throw err;
  }
  $("signin").hidden = true;
  $("view-key").hidden = false;
  $("signout").hidden = false;
  say("");
}

function signOut(message, isError) {
  sessionStorage.removeItem(KEY);
  state.render++;
  state.cursors = [null];
  state.page = 0;
  for (const id of ["key-cards", "key-facts", "key-usage-rows"]) $(id).replaceChildren();
  $("who").textContent = "";
  $("view-key").hidden = true;
  $("signout").hidden = true;
  $("signin").hidden = false;
  document.body.dataset.ready = "signin";
  say(message || "", isError);
  $("key").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("key").value.trim();
    $("key").value = "";
    signIn(value).catch((err) => {
      signOut("", false);
      say("Sign-in failed: " + (err && err.message ? err.message : err), true);
    });
  });
  $("signout").addEventListener("click", () => signOut("Signed out."));
  $("key-page-next").addEventListener("click", () => {
    state.page++;
    showUsage(state.render).catch(fail);
  });
  $("key-page-prev").addEventListener("click", () => {
    state.page = Math.max(0, state.page - 1);
    showUsage(state.render).catch(fail);
  });
  const saved = sessionStorage.getItem(KEY);
  if (saved) signIn(saved).catch((err) => signOut("Sign-in failed: " + err.message, true));
  else signOut("", false);
});
