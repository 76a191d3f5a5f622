// Admin tokens: who holds access to this dashboard and /admin/api. Operators see and issue any;
// account owners see their account's tokens and may revoke them (a leaked one, or their own).

import { api, query } from "./api.js";
import { ask, confirmAction, showSecret } from "./dialogs.js";
import { $, ago, badge, button, cell, el, fill, when } from "./dom.js";

const state = { ctx: null };

export function wire(app) {
  $("token-new").addEventListener("click", () => state.ctx && issueToken(state.ctx, state.ctx.scope.id).catch(app.fail));
}

export function reset() {
  state.ctx = null;
  $("dlg-token-account").replaceChildren();
}

export async function render(ctx) {
  state.ctx = ctx;
  const scope = ctx.scope.id === null ? {} : { account_id: ctx.scope.id };
  const [list, accounts] = await Promise.all([
    api("GET", "/tokens" + query(scope)),
    ctx.operator ? api("GET", "/accounts").then((r) => r.data) : Promise.resolve([ctx.me.account]),
  ]);
  if (ctx.stale()) return;
  const names = new Map(accounts.map((a) => [a.id, a.name]));
  fill($("tokens-rows"), list.data.map((t) => row(ctx, t, names)), 8, "No admin tokens.");
}

function row(ctx, t, names) {
  const tr = el("tr", null, { "data-token": t.id, class: t.state === "active" ? null : "disabled" });
  const scope = t.scope === "operator" ? "operator" : `account ${names.get(t.account_id) || ""} (#${t.account_id})`;
  const name = [el("strong", t.name || "(no name)"), el("span", t.id, { class: "id" })];
  if (t.current) name.push(el("span", "this session", { class: "note" }));
  tr.append(
    cell(name),
    cell(el("code", t.display || "(not kept)")),
    cell(scope),
    cell(badge(t.state)),
    cell(when(t.created_at)),
    cell(el("span", ago(t.last_used_at, ctx.nowMs), { title: t.last_used_at ? when(t.last_used_at) + " UTC" : "" })),
    cell(t.expires_at ? when(t.expires_at) : "never"),
    cell(t.state === "active"
      ? button("Revoke", () => revoke(ctx, t).catch(ctx.fail), { "aria-label": `Revoke token ${t.name || t.id}` })
      : "", "actions"),
  );
  return tr;
}

// Issue a token (operators): for the operator scope or an account; `accountId` preselects one.
export async function issueToken(ctx, accountId) {
  const accounts = (await api("GET", "/accounts")).data;
  const issued = await ask("dlg-token", {
    prepare: () => {
      const choices = [el("option", "Operator (every account)", { value: "" }),
        ...accounts.map((a) => el("option", `Account ${a.name} (#${a.id})`, { value: a.id }))];
      $("dlg-token-account").replaceChildren(...choices);
      $("dlg-token-account").value = accountId === null || accountId === undefined ? "" : String(accountId);
    },
    submit: () => {
      const body = { name: $("dlg-token-name").value.trim() };
      const account = $("dlg-token-account").value;
      if (account) body.account_id = Number(account);
      const expiry = $("dlg-token-expiry").value;
      if (expiry) body.expires_in_seconds = Number(expiry);
      return api("POST", "/tokens", body);
    },
  });
  if (!issued) return;
  ctx.say(`Issued admin token ${issued.name || issued.id}.`);
  await showSecret(`Admin token ${issued.name || issued.id} (${issued.scope === "operator" ? "operator" : "account #" + issued.account_id})`, issued.token);
  ctx.refresh();
}

async function revoke(ctx, t) {
  const self = t.current ? " This is the token you are signed in with: you will be signed out." : "";
  const done = await confirmAction(
    `Revoke admin token ${t.name || t.id}?`,
    `Token “${t.name || "(no name)"}” (${t.id}, ${t.display || "display not kept"}) is refused from its next request, on every instance.${self}`,
    "Revoke token",
    () => api("POST", "/tokens/" + encodeURIComponent(t.id) + "/revoke"),
  );
  if (!done) return;
  ctx.say(`Revoked admin token ${t.name || t.id}.`);
  ctx.refresh();
}
