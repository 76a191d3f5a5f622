// Upstreams (operators): providers with their models, weights and health (cooling down,
// credentials refused or resting, error rate and latency from this server's own counters), and
// forms to add, edit, test and delete them, a model's deployments with their weights, and a price
// editor showing the current price and the scheduled ones. Credentials are write-only: the page
// shows the server's hint (…abcd) and sends a new value only when one is typed.

import { api } from "./api.js";
import { ask, confirmAction } from "./dialogs.js";
import { $, badge, button, cell, el, fill, when } from "./dom.js";

const KINDS = ["anthropic", "openai", "openai-compatible", "bedrock", "vertex", "azure-openai", "simulator"];
const PRICE_FIELDS = ["input", "output", "cache_write", "cache_write_1h", "cache_read", "web_search_request"];
// Fields the provider dialog edits itself; the rest of a provider's settings go in "More settings".
const OWN = new Set(["name", "kind", "base_url", "api_key", "api_key_env"]);
const state = { ctx: null, providers: [], models: [], model: "" };

export function wire(app) {
  $("provider-new").addEventListener("click", () => state.ctx && edit(state.ctx, null).catch(app.fail));
  $("routes-model").addEventListener("change", () => {
    state.model = $("routes-model").value;
    app.refresh();
  });
  $("routes-form").addEventListener("submit", (event) => event.preventDefault());
  $("routes-edit").addEventListener("click", () => state.ctx && editRoutes(state.ctx).catch(app.fail));
  $("price-edit").addEventListener("click", () => state.ctx && editPrice(state.ctx).catch(app.fail));
  $("dlg-routes-add").addEventListener("click", () => addRouteRow({ provider: "", upstream_model: "", weight: 1 }));
  // A first, empty choice: a reset form (signing out) keeps no value of the last session.
  $("dlg-provider-kind").replaceChildren(el("option", "choose a kind", { value: "" }), ...KINDS.map((k) => el("option", k, { value: k })));
}

export function reset() {
  state.ctx = null;
  state.providers = [];
  state.model = "";
  for (const id of ["routes-rows", "price-current", "price-scheduled", "routes-model"]) $(id).replaceChildren();
}

export async function render(ctx) {
  state.ctx = ctx;
  const [providers, models] = await Promise.all([api("GET", "/providers"), api("GET", "/models")]);
  if (ctx.stale()) return;
  state.providers = providers.data;
  state.models = models.data.map((m) => m.id);
  if (!state.models.includes(state.model)) state.model = state.models[0] || "";
  fill($("providers-rows"), state.providers.map((p) => row(ctx, p)), 6, "No providers.");
  $("routes-model").replaceChildren(...state.models.map((m) => el("option", m, { value: m })));
  $("routes-model").value = state.model;
  if (!state.model) return;
  const [routes, price] = await Promise.all([
    api("GET", `/models/${encodeURIComponent(state.model)}/deployments`),
    api("GET", `/models/${encodeURIComponent(state.model)}/price`),
  ]);
  if (ctx.stale()) return;
  $("routes-source").textContent = `from: ${routes.source}`;
  fill($("routes-rows"), routes.deployments.map((d) => {
    const tr = el("tr");
    tr.append(cell(d.provider), cell(el("code", d.upstream_model)), cell(String(d.weight || 1), "num"));
    return tr;
  }), 3, "No deployment.");
  showPrice(price);
}

function health(p) {
  const h = p.health;
  const parts = [];
  if (h.cooling_down) parts.push(badge("cooling"));
  for (const c of h.credentials_out) parts.push(el("span", `${c.credential}: ${c.status} (${c.http_status})`, { class: "badge disabled" }));
  if (!parts.length) parts.push(badge("active"));
  const rate = h.error_rate === null ? "no traffic yet" : `${(h.error_rate * 100).toFixed(1)} % errors of ${h.attempts}`;
  const latency = h.latency_ms === null ? "" : `, ${Math.round(h.latency_ms)} ms to first byte`;
  parts.push(el("span", rate + latency, { class: "note" }));
  return parts;
}

function row(ctx, p) {
  const tr = el("tr", null, { "data-provider": p.name });
  const routes = p.routes.length
    ? p.routes.map((r) => el("div", `${r.model} → ${r.upstream_model} ×${r.weight}`))
    : [el("span", "no model routed here", { class: "note" })];
  const actions = [
    button("Test", () => test(ctx, p).catch(ctx.fail), { "aria-label": `Test ${p.name}` }),
    button("Edit", () => edit(ctx, p).catch(ctx.fail), { "aria-label": `Edit ${p.name}` }),
  ];
  if (p.source !== "file") {
    actions.push(button(p.source === "api" ? "Delete" : "Use the file's", () => remove(ctx, p).catch(ctx.fail),
      { "aria-label": `Delete ${p.name}` }));
  }
  tr.append(
    cell([el("strong", p.name), el("span", p.updated_at ? `changed ${when(p.updated_at)}` : "", { class: "id" })]),
    cell(p.kind),
    cell(p.source),
    cell(routes),
    cell(health(p)),
    cell(actions, "actions"),
  );
  return tr;
}

async function test(ctx, p) {
  ctx.say(`Testing ${p.name}…`);
  const result = await api("POST", `/providers/${encodeURIComponent(p.name)}/test`, {});
  const how = result.ok ? `answered ${result.status} in ${Math.round(result.latency_ms)} ms` : `failed: ${result.error}`;
  ctx.say(`Test of ${p.name} (${result.model || "no model"}): ${how}.`, !result.ok);
  $("providers-rows").querySelector(`tr[data-provider="${CSS.escape(p.name)}"]`)?.setAttribute("data-tested", result.ok ? "ok" : "failed");
}

async function edit(ctx, p) {
  const saved = await ask("dlg-provider", {
    prepare: () => {
      $("dlg-provider-title").textContent = p ? `Edit ${p.name}` : "Add a provider";
      $("dlg-provider-name").value = p ? p.name : "";
      $("dlg-provider-name").readOnly = !!p;
      $("dlg-provider-kind").value = p ? p.kind : "anthropic";
      $("dlg-provider-base").value = p && p.config.base_url ? p.config.base_url : "";
      const key = p && p.config.api_key;
      const hint = Array.isArray(key) ? key.map((k) => k.hint).join(", ") : key ? key.hint : "";
      $("dlg-provider-key").placeholder = hint ? `stored: ${hint} (leave empty to keep)` : "the provider's API key";
      const more = {};
      for (const [k, v] of Object.entries(p ? p.config : {})) if (!OWN.has(k)) more[k] = v;
      if (p && p.config.api_key_env) more.api_key_env = p.config.api_key_env;
      $("dlg-provider-more").value = Object.keys(more).length ? JSON.stringify(more, null, 1) : "";
    },
    submit: () => {
      const body = { kind: $("dlg-provider-kind").value };
      const more = $("dlg-provider-more").value.trim();
      if (more) {
        let parsed;
        try {
          parsed = JSON.parse(more);
        } catch {
          throw new Error("More settings: not valid JSON");
        }
        Object.assign(body, parsed);
      }
      const base = $("dlg-provider-base").value.trim();
      if (base) body.base_url = base;
      const key = $("dlg-provider-key").value.trim();
      if (key) {
        body.api_key = key; // a typed key replaces the variable names a file provider had
        delete body.api_key_env;
      }
      if (!p) return api("POST", "/providers", { name: $("dlg-provider-name").value.trim(), ...body });
      return api("PATCH", `/providers/${encodeURIComponent(p.name)}`, body);
    },
  });
  $("dlg-provider-key").value = "";
  if (!saved) return;
  ctx.say(`${p ? "Saved" : "Added"} provider ${saved.name}: every worker and instance uses it within a second.`);
  ctx.refresh();
}

async function remove(ctx, p) {
  const done = await confirmAction(
    `Delete ${p.name}?`,
    p.source === "api"
      ? "The provider stored through the API is removed. A model still routed to it must be moved first."
      : "The entry stored through the API is removed; the configuration file's provider of this name applies again.",
    "Delete",
    () => api("DELETE", `/providers/${encodeURIComponent(p.name)}`),
  );
  if (!done) return;
  ctx.say(`Deleted ${p.name}.`);
  ctx.refresh();
}

function addRouteRow(d) {
  const tr = el("tr", null, { class: "route" });
  const provider = el("select", null, { "aria-label": "Provider" });
  provider.replaceChildren(...state.providers.map((p) => el("option", p.name, { value: p.name })));
  provider.value = d.provider || (state.providers[0] && state.providers[0].name) || "";
  const upstream = el("input", null, { "aria-label": "Upstream model", required: true, maxlength: 200 });
  upstream.value = d.upstream_model;
  const weight = el("input", null, { type: "number", min: 1, max: 1000, "aria-label": "Weight", required: true });
  weight.value = String(d.weight || 1);
  tr.append(cell(provider), cell(upstream), cell(weight, "num"),
    cell(button("Remove", () => tr.remove(), { "aria-label": "Remove this deployment" }), "actions"));
  $("dlg-routes-rows").append(tr);
}

async function editRoutes(ctx) {
  const current = await api("GET", `/models/${encodeURIComponent(state.model)}/deployments`);
  const saved = await ask("dlg-routes", {
    prepare: () => {
      $("dlg-routes-title").textContent = `Deployments of ${state.model}`;
      $("dlg-routes-rows").replaceChildren();
      for (const d of current.deployments) addRouteRow(d);
    },
    submit: () => {
      const deployments = [...$("dlg-routes-rows").querySelectorAll("tr.route")].map((tr) => {
        const [provider, upstream, weight] = tr.querySelectorAll("select, input");
        return { provider: provider.value, upstream_model: upstream.value.trim(), weight: Number(weight.value) };
      });
      return api("PUT", `/models/${encodeURIComponent(state.model)}/deployments`, { deployments });
    },
  });
  if (!saved) return;
  ctx.say(`Saved the deployments of ${state.model}.`);
  ctx.refresh();
}

function showPrice(price) {
  const current = el("tr");
  current.append(...PRICE_FIELDS.map((f) => cell(price.current[f], "num")),
    cell(price.current.effective_from ? when(price.current.effective_from) : price.current.source));
  fill($("price-current"), [current], 7, "");
  fill($("price-scheduled"), price.scheduled.map((s) => {
    const tr = el("tr");
    tr.append(...PRICE_FIELDS.map((f) => cell(s[f] === undefined ? "—" : s[f], "num")), cell(when(s.effective_from)));
    return tr;
  }), 7, "Nothing scheduled.");
}

async function editPrice(ctx) {
  const saved = await ask("dlg-price", {
    prepare: () => {
      $("dlg-price-title").textContent = `Price of ${state.model}`;
    },
    submit: () => {
      const body = {};
      for (const f of PRICE_FIELDS) {
        const value = $("dlg-price-" + f).value.trim();
        if (value) body[f] = value;
      }
      const from = $("dlg-price-from").value;
      if (from) body.effective_from = new Date(from + "Z").toISOString().replace(/\.\d+Z$/, "Z");
      return api("PUT", `/models/${encodeURIComponent(state.model)}/price`, body);
    },
  });
  if (!saved) return;
  ctx.say(saved.scheduled.length ? `Price of ${state.model} saved; ${saved.scheduled.length} scheduled.` : `Price of ${state.model} saved.`);
  ctx.refresh();
}
