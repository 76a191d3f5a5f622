// Keys: group, state, limits, a cap bar (spent / held / free this UTC month) and one per spend window
// with a cap (view-key-windows.js), last use and, after a
// rotation, until when the old secret works. Create, edit, rotate and revoke in in-page dialogs.

import { api, query } from "./api.js";
import { partsBar } from "./chart.js";
import { ask, confirmAction, showSecret } from "./dialogs.js";
import { $, ago, badge, button, cell, credits, el, fill, when } from "./dom.js";
import { windowBars } from "./view-key-windows.js";

// Keys come a page at a time (PAGE_KEYS, oldest first); "More keys" fetches the next page.
const PAGE_KEYS = 100;
const state = { ctx: null, models: null, accounts: [], keys: [], names: new Map(), next: null, found: null, timer: null };

export function wire() {
  $("key-new").addEventListener("click", () => state.ctx && edit(state.ctx, null).catch(state.ctx.fail));
  // Search narrows the keys already loaded, as you type (name, id, account or shown prefix); while
  // more pages are left unloaded, the server searches every key instead (name, id or prefix).
  $("keys-search").addEventListener("submit", (event) => event.preventDefault());
  $("keys-q").addEventListener("input", () => state.ctx && searchSoon(state.ctx));
  $("keys-more").addEventListener("click", () => state.ctx && more(state.ctx).catch(state.ctx.fail));
  $("dlg-key-group").addEventListener("change", () => modelChoices($("dlg-key-group").value, []));
}

export function reset() {
  state.ctx = null;
  state.models = null;
  state.accounts = [];
  state.keys = [];
  state.next = null;
  state.found = null;
  $("keys-more").hidden = true;
  $("keys-q").value = "";
  $("keys-count").textContent = "";
  $("dlg-key-models").replaceChildren();
  $("dlg-key-account").replaceChildren();
}

export async function render(ctx) {
  state.ctx = ctx;
  const scope = ctx.scope.id === null ? {} : { account_id: ctx.scope.id };
  const [list, models, accounts] = await Promise.all([
    api("GET", "/keys" + query({ ...scope, limit: PAGE_KEYS })),
    state.models ? Promise.resolve(state.models) : api("GET", "/models").then((r) => r.data),
    ctx.operator && ctx.scope.id === null ? api("GET", "/accounts").then((r) => r.data) : Promise.resolve([]),
  ]);
  if (ctx.stale()) return;
  state.models = models;
  state.accounts = accounts;
  $("keys-month").textContent = list.month;
  state.names = new Map(accounts.map((a) => [a.id, a.name]));
  state.keys = list.data;
  state.next = list.next_cursor;
  state.found = null;
  show(ctx);
}

function scopeOf(ctx) {
  return ctx.scope.id === null ? {} : { account_id: ctx.scope.id };
}

async function more(ctx) {
  if (!state.next) return;
  const page = await api("GET", "/keys" + query({ ...scopeOf(ctx), limit: PAGE_KEYS, after: state.next }));
  if (ctx.stale()) return;
  state.keys = state.keys.concat(page.data);
  state.next = page.next_cursor;
  show(ctx);
}

function searchSoon(ctx) {
  clearTimeout(state.timer);
  const needle = $("keys-q").value.trim();
  if (!state.next || !needle) {
    state.found = null;
    show(ctx);
    return;
  }
  state.timer = setTimeout(async () => {
    try {
      const found = await api("GET", "/keys" + query({ ...scopeOf(ctx), limit: PAGE_KEYS, q: needle }));
      if (ctx.stale() || $("keys-q").value.trim() !== needle) return;
      state.found = found;
      show(ctx);
    } catch (error) {
      ctx.fail(error);
    }
  }, 250);
}

function matches(k, needle) {
  const fields = [k.name || "", k.id, k.display || "", state.names.get(k.account_id) || "", String(k.account_id)];
  return fields.some((f) => f.toLowerCase().includes(needle));
}

function show(ctx) {
  $("keys-more").hidden = !state.next || state.found !== null;
  if (state.found !== null) {
    const more = state.found.next_cursor ? "the first " : "";
    $("keys-count").textContent = `${more}${state.found.data.length} keys match “${$("keys-q").value.trim()}”.`;
    fill($("keys-rows"), state.found.data.map((k) => row(ctx, k, state.names)), 10, "No key matches.");
    return;
  }
  const needle = $("keys-q").value.trim().toLowerCase();
  const shown = needle ? state.keys.filter((k) => matches(k, needle)) : state.keys;
  $("keys-count").textContent = needle ? `${shown.length} of ${state.keys.length} keys match “${$("keys-q").value.trim()}”.` : "";
  const empty = needle ? "No key matches." : "No keys yet: create one with New key.";
  fill($("keys-rows"), shown.map((k) => row(ctx, k, state.names)), 10, empty);
}

function capCell(k) {
  const spent = k.spent_this_month_uc;
  const held = k.reserved_this_month_uc;
  if (k.monthly_cap_uc === null) {
    return [el("span", `no cap · ${credits(spent)} spent`), held ? el("span", `${credits(held)} held`, { class: "id" }) : null];
  }
  const free = k.cap_remaining_uc;
  const text = `${credits(spent)} of ${credits(k.monthly_cap_uc)} spent, ${credits(held)} held, ${credits(free)} left`;
  return [
    partsBar([{ value: spent, cls: "spent" }, { value: held, cls: "held" }, { value: free, cls: "free" }], text, "capbar"),
    el("span", `${credits(spent)} / ${credits(k.monthly_cap_uc)}`, { class: "capfig" }),
    el("span", held ? `${credits(held)} held · ${credits(free)} left` : `${credits(free)} left`, { class: "id" }),
  ];
}

function rotationCell(k) {
  if (k.previous_secret_active) {
    return el("span", "old secret works until " + when(k.previous_secret_valid_until), { class: "note" });
  }
  return k.rotated_at ? el("span", "rotated " + when(k.rotated_at), { class: "muted" }) : "—";
}

function row(ctx, k, names) {
  const tr = el("tr", null, { "data-key": k.id, class: k.state === "active" ? null : "disabled" });
  const actions = [
    el("a", "Usage", { href: ctx.href("usage", ctx.operator ? k.account_id : null, { key: k.id }) }),
  ];
  if (k.state === "active") {
    actions.unshift(
      button("Edit", () => edit(ctx, k).catch(ctx.fail), { "aria-label": `Edit key ${k.name || k.id}` }),
      button("Rotate", () => rotate(ctx, k).catch(ctx.fail), { "aria-label": `Rotate key ${k.name || k.id}` }),
      button("Revoke", () => revoke(ctx, k).catch(ctx.fail), { "aria-label": `Revoke key ${k.name || k.id}` }),
    );
  }
  const lastUsed = el("span", ago(k.last_used_at, ctx.nowMs), { title: k.last_used_at ? when(k.last_used_at) + " UTC" : "" });
  tr.append(
    cell([el("strong", k.name || "(no name)"), el("span", k.id, { class: "id" }), el("span", k.display, { class: "id" })]),
    cell(names.get(k.account_id) || "#" + k.account_id, "op-col"),
    cell(k.group),
    cell([
      badge(k.expired ? "expired" : k.state),
      k.expires_at ? el("span", (k.expired ? "since " : "until ") + when(k.expires_at), { class: "id" }) : null,
      k.allowed_ips ? el("span", "from " + k.allowed_ips.join(", "), { class: "id" }) : null,
    ]),
    cell(String(k.rpm), "num"),
    cell(k.allowed_models ? k.allowed_models.join(", ") : "all of the group"),
    cell([...capCell(k), windowBars(k)]),
    cell(lastUsed),
    cell(rotationCell(k)),
    cell(actions, "actions"),
  );
  return tr;
}

function modelChoices(group, chosen) {
  const boxes = (state.models || [])
    .filter((m) => m.groups.includes(group))
    .map((m) => {
      const label = el("label");
      const box = el("input", null, { type: "checkbox", value: m.id });
      box.checked = chosen.includes(m.id);
      label.append(box, m.id);
      return label;
    });
  $("dlg-key-models").replaceChildren(...boxes);
}

function chosenModels() {
  return [...$("dlg-key-models").querySelectorAll("input:checked")].map((b) => b.value);
}

// The dialog's expiry (a UTC date-time, seconds optional) as RFC 3339, and its address ranges;
// null for either means none (never expires, usable from anywhere).
function keyAccess() {
  const at = $("dlg-key-expires").value;
  const ranges = $("dlg-key-ips").value.split(/[\s,]+/).filter((r) => r);
  return {
    expires_at: at ? (at.length === 16 ? at + ":00" : at) + "Z" : null,
    allowed_ips: ranges.length ? ranges : null,
  };
}

async function edit(ctx, key) {
  const creating = key === null;
  const needsAccount = creating && ctx.operator && ctx.scope.id === null;
  const result = await ask("dlg-key", {
    prepare: () => {
      $("dlg-key-title").textContent = creating ? "New key" : `Edit key ${key.name || key.id}`;
      $("dlg-key-submit").textContent = creating ? "Create key" : "Save";
      $("dlg-key-account-label").hidden = !needsAccount;
      $("dlg-key-account").replaceChildren(...state.accounts.map((a) => el("option", `${a.name} (#${a.id})`, { value: a.id })));
      $("dlg-key-group").disabled = !creating;
      $("dlg-key-group").value = creating ? "Basic" : key.group;
      $("dlg-key-name").value = creating ? "" : key.name;
      $("dlg-key-rpm").value = creating ? "" : String(key.rpm);
      $("dlg-key-cap").value = creating || key.monthly_cap === null ? "" : key.monthly_cap;
      modelChoices($("dlg-key-group").value, creating ? [] : key.allowed_models || []);
      $("dlg-key-expires").value = creating || !key.expires_at ? "" : key.expires_at.slice(0, 19);
      $("dlg-key-ips").value = creating || !key.allowed_ips ? "" : key.allowed_ips.join("\n");
    },
    submit: async () => {
      const models = chosenModels();
      const cap = $("dlg-key-cap").value.trim();
      const rpm = $("dlg-key-rpm").value.trim();
      const access = keyAccess();
      if (creating) {
        const body = { group: $("dlg-key-group").value, name: $("dlg-key-name").value.trim() };
        if (needsAccount) body.account_id = Number($("dlg-key-account").value);
        else if (ctx.operator) body.account_id = ctx.scope.id;
        if (rpm) body.rpm = Number(rpm);
        if (models.length) body.allowed_models = models;
        if (cap) body.monthly_cap = cap;
        if (access.expires_at) body.expires_at = access.expires_at;
        if (access.allowed_ips) body.allowed_ips = access.allowed_ips;
        return api("POST", "/keys", body);
      }
      const body = { name: $("dlg-key-name").value.trim(), allowed_models: models.length ? models : null, monthly_cap: cap || null, ...access };
      if (rpm) body.rpm = Number(rpm);
      return api("PATCH", "/keys/" + encodeURIComponent(key.id), body);
    },
  });
  if (!result) return;
  if (creating) {
    ctx.say(`Created key ${result.name || result.id}.`);
    await showSecret(`Secret of key ${result.name || result.id}`, result.secret);
  } else {
    ctx.say(`Saved key ${result.name || result.id}.`);
  }
  ctx.refresh();
}

async function rotate(ctx, key) {
  const result = await ask("dlg-rotate", {
    prepare: () => {
      $("dlg-rotate-title").textContent = `Rotate key ${key.name || key.id}`;
    },
    submit: () => api("POST", "/keys/" + encodeURIComponent(key.id) + "/rotate", { grace_seconds: Number($("dlg-rotate-grace").value) }),
  });
  if (!result) return;
  ctx.say(`Rotated key ${result.name || result.id}.`);
  await showSecret(`New secret of key ${result.name || result.id}`, result.secret);
  ctx.refresh();
}

async function revoke(ctx, key) {
  const done = await confirmAction(
    `Revoke key ${key.name || key.id}?`,
    `Key “${key.name || "(no name)"}” (${key.id}, ${key.display}) stops working at once, on every instance. This cannot be undone.`,
    "Revoke key",
    () => api("POST", "/keys/" + encodeURIComponent(key.id) + "/revoke"),
  );
  if (!done) return;
  ctx.say(`Revoked key ${key.name || key.id}.`);
  ctx.refresh();
}
