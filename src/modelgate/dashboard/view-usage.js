// The usage log: filter by key, model, endpoint, status and UTC date range, page through the
// records newest first (the server pages by cursor, so pages stay put while records arrive), and
// export the filtered records as CSV.

import { api, download, query } from "./api.js";
import { $, cell, count, credits, el, fill, when } from "./dom.js";

// cursors[i] is the cursor of page i (null for the first); filters are what the form applied.
const state = {
  ctx: null, filters: null, cursors: [null], page: 0, total: 0, scopeKey: undefined, keys: new Map(), accounts: new Map(),
};
const SELECTS = { model: "f-model", endpoint: "f-endpoint", status: "f-status" };
const FACETS = { model: "models", endpoint: "endpoints", status: "statuses" };
const ALL = { model: "All models", endpoint: "All endpoints", status: "All statuses" };

export function wire(app) {
  $("usage-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    state.filters = fromForm();
    restart(app);
  });
  $("f-limit").addEventListener("change", () => restart(app));
  $("f-reset").addEventListener("click", () => {
    state.filters = null;
    restart(app);
  });
  $("page-next").addEventListener("click", () => {
    state.page += 1;
    app.refresh();
  });
  $("page-prev").addEventListener("click", () => {
    state.page = Math.max(0, state.page - 1);
    app.refresh();
  });
  $("f-csv").addEventListener("click", () => {
    const filters = fromForm();
    download("/usage/records.csv" + query({ ...scopeOf(state.ctx), ...filters }), "modelgate-usage.csv")
      .then((name) => app.say(`Exported ${name}.`))
      .catch(app.fail);
  });
}

function restart(app) {
  state.cursors = [null];
  state.page = 0;
  app.refresh();
}

export function reset() {
  state.ctx = null;
  state.filters = null;
  state.cursors = [null];
  state.page = 0;
  state.total = 0;
  state.scopeKey = undefined;
  state.keys = new Map();
  state.accounts = new Map();
  for (const id of ["f-key", ...Object.values(SELECTS)]) $(id).replaceChildren($(id).firstElementChild || el("option"));
  $("usage-count").textContent = "";
  $("page-info").textContent = "";
  $("quality-summary").textContent = "";
  $("quality-rows").replaceChildren();
}

function scopeOf(ctx) {
  return ctx && ctx.scope.id !== null ? { account_id: ctx.scope.id } : {};
}

function defaults(ctx) {
  const today = ctx.me.now.slice(0, 10);
  return { from: today.slice(0, 8) + "01", to: today, key_id: ctx.search.get("key") || "", model: "", endpoint: "", status: "" };
}

function fromForm() {
  return {
    from: $("f-from").value, to: $("f-to").value, key_id: $("f-key").value,
    model: $("f-model").value, endpoint: $("f-endpoint").value, status: $("f-status").value,
  };
}

function toForm(filters) {
  $("f-from").value = filters.from;
  $("f-to").value = filters.to;
  for (const [name, id] of Object.entries({ key_id: "f-key", ...SELECTS })) $(id).value = filters[name] || "";
}

function options(id, allLabel, values, chosen) {
  const list = [...new Set([...values, ...(chosen ? [chosen] : [])])].sort();
  const labelOf = (v) => (id === "f-key" ? state.keys.get(v) || v : v);
  $(id).replaceChildren(el("option", allLabel, { value: "" }), ...list.map((v) => el("option", labelOf(v), { value: v })));
  $(id).value = chosen || "";
}

export async function render(ctx) {
  state.ctx = ctx;
  // A new scope (another account, or a link to one key) starts from the defaults.
  const scopeKey = `${ctx.scope.id}|${ctx.search.get("key") || ""}`;
  if (scopeKey !== state.scopeKey || !state.filters) {
    if (scopeKey !== state.scopeKey) state.filters = null;
    state.scopeKey = scopeKey;
    state.filters = state.filters || defaults(ctx);
    state.cursors = [null];
    state.page = 0;
  }
  const filters = state.filters;
  const limit = $("f-limit").value;
  const cursor = state.cursors[state.page];
  const [keys, page, accounts, quality] = await Promise.all([
    api("GET", "/keys" + query(scopeOf(ctx))),
    api("GET", "/usage/records" + query({ ...scopeOf(ctx), ...filters, limit, cursor })),
    ctx.operator && ctx.scope.id === null ? api("GET", "/accounts").then((r) => r.data) : Promise.resolve([]),
    // The error and latency figures of the whole filter: read once per filter, not per page. A
    // filter too wide for it (admin.csv_max_rows) says so there and leaves the log usable.
    cursor === null
      ? api("GET", "/usage/quality" + query({ ...scopeOf(ctx), ...filters })).catch((err) => ({ error: err }))
      : Promise.resolve(null),
  ]);
  if (ctx.stale()) return;
  if (quality) showQuality(quality);
  state.accounts = new Map(accounts.map((a) => [a.id, a.name]));
  state.keys = new Map(keys.data.map((k) => [k.id, k.name || k.id]));
  options("f-key", "All keys", [...state.keys.keys()], filters.key_id);
  if (page.facets) {
    for (const [name, id] of Object.entries(SELECTS)) options(id, ALL[name], page.facets[FACETS[name]], filters[name]);
    state.total = page.total;
  }
  toForm(filters);
  state.cursors[state.page + 1] = page.next_cursor;
  const first = state.page * Number(limit);
  $("usage-count").textContent = `${count(state.total)} records match`;
  $("page-info").textContent = page.data.length ? `${count(first + 1)}–${count(first + page.data.length)} of ${count(state.total)}` : "";
  $("page-prev").disabled = state.page === 0;
  $("page-next").disabled = !page.next_cursor;
  fill($("usage-rows"), page.data.map((r) => row(r)), 10, "No records match these filters.");
}

function row(r) {
  const tr = el("tr");
  tr.append(
    cell(when(r.created_at)),
    cell([el("span", state.keys.get(r.key_id) || r.key_id), el("span", r.key_id, { class: "id" })]),
    cell(state.accounts.get(r.account_id) || "#" + r.account_id, "op-col"),
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

function ms(value) {
  return value === null || value === undefined ? "—" : count(Math.round(value)) + " ms";
}

function percent(rate) {
  return (rate * 100).toLocaleString("en-US", { maximumFractionDigits: 1 }) + " %";
}

// Errors and latency per day (GET /usage/quality): every status but ok is an error; refused_* are
// the requests the gateway refused for the key (402, 404, 429); latency is of served requests.
function showQuality(quality) {
  if (quality.error) {
    $("quality-summary").textContent = quality.error.message || String(quality.error);
    $("quality-rows").replaceChildren();
    return;
  }
  const t = quality.total;
  $("quality-summary").textContent = t.requests
    ? `${count(t.errors)} of ${count(t.requests)} requests failed or were refused (${percent(t.error_rate)}; ` +
      `${count(t.refused)} refused); served requests took ${ms(t.p50_ms)} at the median, ${ms(t.p95_ms)} at the 95th percentile.`
    : "No requests in these filters.";
  const rows = quality.data.map((d) => {
    const tr = el("tr", null, { "data-day": d.day, class: d.errors ? "has-errors" : null });
    tr.append(
      cell(d.day),
      cell(count(d.requests), "num"),
      cell(count(d.errors), "num"),
      cell(percent(d.error_rate), "num"),
      cell(count(d.refused), "num"),
      cell(ms(d.p50_ms), "num"),
      cell(ms(d.p95_ms), "num"),
      cell(ms(d.max_ms), "num"),
    );
    return tr;
  });
  fill($("quality-rows"), rows, 8, "No requests in these filters.");
}
