// People of one account: its members and their roles, and the invitations waiting to be used.
// Owners (and operators, and account tokens) invite, change roles, remove members and withdraw
// invitations; members see the list only. The invitation's link is shown once, like a secret.

import { api, query } from "./api.js";
import { ask, confirmAction, showSecret } from "./dialogs.js";
import { $, ago, badge, button, cell, el, fill, when } from "./dom.js";

const state = { ctx: null };

export function wire(app) {
  $("invite-new").addEventListener("click", () => state.ctx && invite(state.ctx).catch(app.fail));
}

export function reset() {
  state.ctx = null;
}

const manages = (ctx) => ctx.me.role !== "member";

export async function render(ctx) {
  state.ctx = ctx;
  const account = ctx.scope.id;
  $("members-pick").hidden = account !== null;
  $("members-body").hidden = account === null;
  $("invite-new").hidden = account === null || !manages(ctx);
  if (account === null) return;
  const [members, invites] = await Promise.all([
    api("GET", `/accounts/${account}/members`),
    manages(ctx) ? api("GET", "/invites" + query({ account_id: account })) : Promise.resolve({ data: [] }),
  ]);
  if (ctx.stale()) return;
  fill($("members-rows"), members.data.map((m) => memberRow(ctx, m)), 5, "No members yet: invite someone.");
  const open = invites.data.filter((i) => i.state === "open");
  fill($("invites-rows"), open.map((i) => inviteRow(ctx, i)), 5, "No open invitations.");
}

function memberRow(ctx, m) {
  const tr = el("tr", null, { "data-person": m.person_id });
  const other = m.role === "owner" ? "member" : "owner";
  tr.append(
    cell([el("strong", m.name || m.email || m.person_id), el("span", m.email, { class: "id" })]),
    cell(badge(m.role)),
    cell(when(m.since)),
    cell(ago(m.last_sign_in, ctx.nowMs)),
    cell(manages(ctx)
      ? [button(`Make ${other}`, () => setRole(ctx, m, other).catch(ctx.fail)),
        button("Remove", () => remove(ctx, m).catch(ctx.fail), { "aria-label": `Remove ${m.name || m.email}` })]
      : "", "actions"),
  );
  return tr;
}

function inviteRow(ctx, i) {
  const tr = el("tr", null, { "data-invite": i.id });
  tr.append(
    cell(i.email || "(anyone with the link)"),
    cell(badge(i.role)),
    cell(i.created_by),
    cell(when(i.expires_at)),
    cell(button("Withdraw", () => withdraw(ctx, i).catch(ctx.fail)), "actions"),
  );
  return tr;
}

async function invite(ctx) {
  const made = await ask("dlg-invite", {
    prepare: () => {},
    submit: () => api("POST", "/invites", {
      account_id: ctx.scope.id,
      role: $("dlg-invite-role").value || "member",
      email: $("dlg-invite-email").value.trim(),
    }),
  });
  if (!made) return;
  ctx.say(`Invited a new ${made.role}: the link works once, until ${when(made.expires_at)} UTC.`);
  await showSecret(`Invitation link (${made.role})`, location.origin + made.link);
  ctx.refresh();
}

async function setRole(ctx, m, role) {
  await api("PATCH", `/accounts/${ctx.scope.id}/members/${encodeURIComponent(m.person_id)}`, { role });
  ctx.say(`${m.name || m.email} is now ${role === "owner" ? "an owner" : "a member"}.`);
  ctx.refresh();
}

async function remove(ctx, m) {
  const done = await confirmAction(
    `Remove ${m.name || m.email}?`,
    `${m.name || m.email} leaves this account and is signed out at their next request. Their keys stay.`,
    "Remove",
    () => api("DELETE", `/accounts/${ctx.scope.id}/members/${encodeURIComponent(m.person_id)}`),
  );
  if (!done) return;
  ctx.say(`Removed ${m.name || m.email}.`);
  ctx.refresh();
}

async function withdraw(ctx, i) {
  await api("DELETE", "/invites/" + encodeURIComponent(i.id));
  ctx.say("Invitation withdrawn: its link no longer works.");
  ctx.refresh();
}
