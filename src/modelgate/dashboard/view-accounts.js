// Accounts (operators): search by name or id, create, top up, issue an owner token, and open one
// account, which scopes every other view to it until "All accounts" is chosen again.

import { api, query } from "./api.js";
import { ask } from "./dialogs.js";
import { issueToken } from "./view-tokens.js";
import { $, button, cell, count, credits, el, fill, when } from "./dom.js";

const state = { ctx: null, q: "" };

export function wire(app) {
  $("accounts-search").addEventListener("submit", (event) => {
    event.preventDefault();
    state.q = $("accounts-q").value.trim();
    app.refresh();
  });
  $("account-new").addEventListener("click", () => state.ctx && create(state.ctx).catch(app.fail));
}

export function reset() {
  state.ctx = null;
  state.q = "";
  $("accounts-count").textContent = "";
}

export async function render(ctx) {
  state.ctx = ctx;
  $("accounts-q").value = state.q;
  const list = await api("GET", "/accounts" + query({ q: state.q }));
  if (ctx.stale()) return;
  $("accounts-count").textContent = state.q
    ? `${count(list.total)} accounts match “${state.q}”`
    : `${count(list.total)} accounts`;
  fill($("accounts-rows"), list.data.map((a) => row(ctx, a)), 7, state.q ? "No account matches." : "No accounts yet.");
}

function row(ctx, a) {
  const tr = el("tr", null, { "data-account": a.id });
  tr.append(
    cell(String(a.id), "num"),
    cell(el("a", a.name, { href: ctx.href("overview", a.id) })),
    cell(credits(a.balance_uc), "num"),
    cell(credits(a.reserved_uc), "num"),
    cell(credits(a.available_uc), "num"),
    cell(when(a.created_at)),
    cell([
      el("a", "Keys", { href: ctx.href("keys", a.id) }),
      " ",
      button("Top up", () => topUp(ctx, a).catch(ctx.fail), { "aria-label": `Top up ${a.name}` }),
      button("Rename", () => rename(ctx, a).catch(ctx.fail), { "aria-label": `Rename ${a.name}` }),
      button("Owner token", () => issueToken(ctx, a.id).catch(ctx.fail), { "aria-label": `Issue an owner token for ${a.name}` }),
    ], "actions"),
  );
  return tr;
}

async function create(ctx) {
  const account = await ask("dlg-account", {
    submit: () => {
      const body = { name: $("dlg-account-name").value.trim() };
      const opening = $("dlg-account-credits").value.trim();
      if (opening) body.credits = opening;
      return api("POST", "/accounts", body);
    },
  });
  if (!account) return;
  ctx.say(`Created account ${account.name} (#${account.id}).`);
  ctx.refresh();
}

async function topUp(ctx, account) {
  const updated = await ask("dlg-topup", {
    prepare: () => {
      $("dlg-topup-title").textContent = `Top up ${account.name}`;
    },
    submit: () => api("POST", `/accounts/${account.id}/topups`, {
      amount: $("dlg-topup-amount").value.trim(),
      note: $("dlg-topup-note").value.trim(),
    }),
  });
  if (!updated) return;
  ctx.say(`${updated.name}: balance ${updated.balance} credits.`);
  ctx.refresh();
}


async function rename(ctx, account) {
  const updated = await ask("dlg-rename", {
    prepare: () => {
      $("dlg-rename-title").textContent = `Rename ${account.name}`;
      $("dlg-rename-name").value = account.name;
    },
    submit: () => api("PATCH", `/accounts/${account.id}`, { name: $("dlg-rename-name").value.trim() }),
  });
  if (!updated) return;
  ctx.say(`Renamed ${account.name} to ${updated.name}.`);
  ctx.refresh();
}
