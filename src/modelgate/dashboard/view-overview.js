// Overview: balance and this month's figures, spend per day stacked by model, requests and tokens
// per day, and the keys that spent most, for one account or (operator) all of them.

import { api, query } from "./api.js";
import { MAX_SERIES, barChart, legend, partsBar } from "./chart.js";
import { $, cell, compact, count, creditDigits, credits, el, fill } from "./dom.js";

const state = { month: null, data: null };

function shiftMonth(month, by) {
  const [y, m] = month.split("-").map(Number);
  const d = new Date(Date.UTC(y, m - 1 + by, 1));
  return d.toISOString().slice(0, 7);
}

function daysOf(month) {
  const [y, m] = month.split("-").map(Number);
  const n = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return Array.from({ length: n }, (_, i) => `${month}-${String(i + 1).padStart(2, "0")}`);
}

export function wire(app) {
  const go = (month) => {
    state.month = month;
    app.refresh();
  };
  $("month-prev").addEventListener("click", () => go(shiftMonth($("overview-month").value || state.month, -1)));
  $("month-next").addEventListener("click", () => go(shiftMonth($("overview-month").value || state.month, 1)));
  $("overview-month").addEventListener("change", () => {
    if (/^[0-9]{4}-[0-9]{2}$/.test($("overview-month").value)) go($("overview-month").value);
  });
  let timer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(timer);
    timer = setTimeout(() => state.data && !$("view-overview").hidden && draw(state.data), 150);
  });
}

export function reset() {
  state.month = null;
  state.data = null;
  for (const id of ["overview-cards", "chart-spend", "chart-spend-legend", "chart-requests", "chart-tokens", "chart-tokens-legend"]) {
    $(id).replaceChildren();
  }
}

function card(label, value, sub) {
  const node = el("div", null, { class: "card" });
  node.append(el("div", label, { class: "label" }), el("div", value, { class: "value" }));
  if (sub) node.append(el("div", sub, { class: "sub" }));
  return node;
}

export async function render(ctx) {
  const month = state.month || ctx.me.month;
  $("overview-month").value = month;
  const scope = ctx.scope.id === null ? {} : { account_id: ctx.scope.id };
  const [summary, daily, top, accounts] = await Promise.all([
    api("GET", "/usage" + query({ month, limit: 0, ...scope })),
    api("GET", "/usage/daily" + query({ month, ...scope })),
    api("GET", "/usage/top-keys" + query({ month, limit: 8, ...scope })),
    ctx.scope.id === null ? api("GET", "/accounts").then((r) => r.data) : api("GET", "/accounts/" + ctx.scope.id).then((a) => [a]),
  ]);
  if (ctx.stale()) return;
  state.data = { month, daily: daily.data };
  const s = summary.summary;
  const balance = accounts.reduce((sum, a) => sum + a.balance_uc, 0);
  const held = accounts.reduce((sum, a) => sum + a.reserved_uc, 0);
  const tokens = s.input_tokens + s.output_tokens + s.cache_creation_tokens + s.cache_read_tokens;
  // The money cards share one precision: the finest any of them needs (a balance of 125 credits
  // beside a spend of 0.0123 shows 125.0000, not 125.00).
  const digits = Math.max(...[balance, held, balance - held, s.charged_uc].map(creditDigits));
  const money = (micro) => credits(micro, digits);
  $("overview-cards").replaceChildren(
    ctx.scope.id === null
      ? card("Balance, all accounts", money(balance), `${accounts.length} accounts · ${money(held)} held`)
      : card("Available", money(balance - held), `balance ${money(balance)} · ${money(held)} held`),
    card("Spent in " + month, money(s.charged_uc), "credits"),
    card("Requests", count(s.requests), month),
    card("Tokens", compact(tokens), `${compact(s.input_tokens)} in · ${compact(s.output_tokens)} out`),
  );
  draw(state.data);
  dataTable(daily.data);
  topKeys(ctx, top.data, s.charged_uc, accounts);
}

function draw({ month, daily }) {
  const labels = daysOf(month);
  const index = new Map(labels.map((d, i) => [d, i]));
  const spendByModel = new Map();
  for (const row of daily) spendByModel.set(row.model, (spendByModel.get(row.model) || 0) + row.charged_uc);
  let models = [...spendByModel.keys()].sort((a, b) => spendByModel.get(b) - spendByModel.get(a) || a.localeCompare(b));
  const other = models.length > MAX_SERIES ? new Set(models.slice(MAX_SERIES - 1)) : new Set();
  if (other.size) models = [...models.slice(0, MAX_SERIES - 1), "other models"];
  const spend = models.map((name) => ({ name, values: labels.map(() => 0) }));
  const requests = [{ name: "requests", values: labels.map(() => 0) }];
  const tokens = ["input", "output", "cache"].map((name) => ({ name, values: labels.map(() => 0) }));
  for (const row of daily) {
    const i = index.get(row.day);
    if (i === undefined) continue;
    const k = other.has(row.model) ? models.length - 1 : models.indexOf(row.model);
    spend[k].values[i] += row.charged_uc / 1e6;
    requests[0].values[i] += row.requests;
    tokens[0].values[i] += row.input_tokens;
    tokens[1].values[i] += row.output_tokens;
    tokens[2].values[i] += row.cache_tokens;
  }
  const money = (v) => credits(Math.round(v * 1e6));
  barChart($("chart-spend"), { labels, series: spend, format: money, describe: `Spend per day by model in ${month}` });
  legend($("chart-spend-legend"), models);
  barChart($("chart-requests"), { labels, series: requests, format: compact, size: "small", describe: `Requests per day in ${month}` });
  barChart($("chart-tokens"), { labels, series: tokens, format: compact, size: "small", describe: `Tokens per day in ${month}` });
  legend($("chart-tokens-legend"), tokens.map((t) => t.name));
}

function dataTable(daily) {
  const rows = daily.map((d) => {
    const tr = el("tr");
    tr.append(cell(d.day), cell(d.model), cell(count(d.requests), "num"),
      cell(count(d.input_tokens + d.output_tokens + d.cache_tokens), "num"), cell(credits(d.charged_uc), "num"));
    return tr;
  });
  fill($("overview-days"), rows, 5, "No usage in this month.");
}

function topKeys(ctx, spenders, total, accounts) {
  const names = new Map(accounts.map((a) => [a.id, a.name]));
  const rows = spenders.map((t) => {
    const tr = el("tr");
    const link = el("a", t.name || t.key_id, { href: ctx.href("usage", ctx.operator ? t.account_id : null, { key: t.key_id }) });
    const share = total ? t.charged_uc / total : 0;
    tr.append(
      cell([link, el("span", t.key_id, { class: "id" })]),
      cell(names.get(t.account_id) || "#" + t.account_id, "op-col"),
      cell(count(t.requests), "num"),
      cell(compact(t.tokens), "num"),
      cell(credits(t.charged_uc), "num"),
      cell(partsBar([{ value: share, cls: "fill" }, { value: 1 - share, cls: "rest" }],
        `${Math.round(share * 100)}% of this month's spend`, "share")),
    );
    return tr;
  });
  fill($("top-keys"), rows, 6, "No key has spent anything this month.");
}
