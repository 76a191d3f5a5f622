// History: the audit log (who changed what, with the values before and after) and, for one
// account, its ledger (top-ups and adjustments with their notes) and monthly statement. Operators
// see every entry; an account owner sees its own account's. Everything is read-only here: the log
// is append-only and no endpoint changes it.

import { api, download, query } from "./api.js";
import { $, cell, credits, el, fill, when } from "./dom.js";

const state = { ctx: null, action: "", cursor: null, cursors: [] };

export function wire(app) {
  $("audit-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    state.action = $("audit-action").value.trim();
    state.cursor = null;
    state.cursors = [];
    app.refresh();
  });
  $("audit-csv").addEventListener("click", () => state.ctx && exportCsv(state.ctx).catch(app.fail));
  $("audit-next").addEventListener("click", () => {
    if (!state.next) return;
    state.cursors.push(state.cursor);
    state.cursor = state.next;
    app.refresh();
  });
  $("audit-prev").addEventListener("click", () => {
    if (!state.cursors.length) return;
    state.cursor = state.cursors.pop();
    app.refresh();
  });
  $("statement-form").addEventListener("submit", (event) => {
    event.preventDefault();
    app.refresh();
  });
  $("statement-csv").addEventListener("click", () => state.ctx && statementCsv(state.ctx).catch(app.fail));
}

export function reset() {
  Object.assign(state, { ctx: null, action: "", cursor: null, cursors: [], next: null });
  $("statement-lines").replaceChildren();
  $("ledger-rows").replaceChildren();
}

function scopeParams(ctx) {
  return ctx.scope.id === null ? {} : { account_id: ctx.scope.id };
}

export async function render(ctx) {
  state.ctx = ctx;
  $("audit-action").value = state.action;
  if (!$("statement-month").value) $("statement-month").value = ctx.me.month;
  const account = ctx.scope.id;
  const page = await api("GET", "/audit" + query({ ...scopeParams(ctx), action: state.action, limit: 50, cursor: state.cursor }));
  let ledger = null;
  let statement = null;
  if (account !== null) {
    [ledger, statement] = await Promise.all([
      api("GET", `/accounts/${account}/ledger?limit=50`),
      api("GET", `/accounts/${account}/statement` + query({ month: $("statement-month").value })),
    ]);
  }
  if (ctx.stale()) return;
  state.next = page.next_cursor;
  $("audit-prev").disabled = !state.cursors.length;
  $("audit-next").disabled = !page.next_cursor;
  fill($("audit-rows"), page.data.map(auditRow), 6, "No entries.");
  $("account-money").hidden = account === null;
  if (account !== null) {
    fill($("ledger-rows"), ledger.data.map(ledgerRow), 5, "No top-ups yet.");
    showStatement(statement);
  }
}

// Only the fields that changed, as "field: before → after" (a creation shows what was set).
function changes(entry) {
  const before = entry.before || {};
  const after = entry.after || {};
  const lines = [];
  for (const name of Object.keys(after)) {
    const was = JSON.stringify(before[name]);
    const now = JSON.stringify(after[name]);
    if (entry.before && was === now) continue;
    lines.push(el("div", entry.before && name in before ? `${name}: ${was} → ${now}` : `${name}: ${now}`));
  }
  return lines.length ? lines : [el("div", "—")];
}

function auditRow(entry) {
  const tr = el("tr", null, { "data-audit": entry.id });
  tr.append(
    cell(when(entry.at)),
    cell(entry.actor),
    cell(el("code", entry.action)),
    cell(entry.target),
    cell(changes(entry)),
    cell([el("span", entry.client || "", { class: "id" }), el("span", entry.request_id, { class: "id" })]),
  );
  return tr;
}

function ledgerRow(entry) {
  const tr = el("tr", null, { "data-ledger": entry.id });
  tr.append(
    cell(when(entry.created_at)),
    cell(entry.kind),
    cell(credits(entry.amount_uc), "num"),
    cell(entry.note),
    cell(entry.actor),
  );
  return tr;
}

function showStatement(s) {
  const lines = [
    ["Opening balance", s.opening_uc],
    ["Top-ups", s.top_ups_uc],
    ["Usage", -s.usage_uc],
    ["Adjustments", s.adjustments_uc],
    ["Closing balance", s.closing_uc],
  ];
  if (s.current) lines.push(["Held by requests in flight", s.held_uc], ["Available", s.available_uc]);
  $("statement-lines").replaceChildren(...lines.map(([label, micro]) => {
    const tr = el("tr");
    tr.append(el("th", label, { scope: "row" }), cell(credits(micro, 6), "num"));
    return tr;
  }));
  $("statement-note").textContent = `${s.month}: ${s.requests} requests` + (s.current ? " (month in progress)" : "");
}

async function exportCsv(ctx) {
  const name = await download("/audit" + query({ ...scopeParams(ctx), action: state.action, format: "csv" }), "audit.csv");
  ctx.say(`Exported ${name}.`);
}

async function statementCsv(ctx) {
  if (ctx.scope.id === null) return;
  const path = `/accounts/${ctx.scope.id}/statement` + query({ month: $("statement-month").value, format: "csv" });
  const name = await download(path, "statement.csv");
  ctx.say(`Exported ${name}.`);
}
