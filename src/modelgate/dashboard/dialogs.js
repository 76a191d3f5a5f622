// In-page dialogs (native <dialog>: modal, Escape closes, focus stays inside) instead of
// window.prompt/confirm. `ask` opens one and resolves with the submit handler's result, or null
// when cancelled; a failing handler shows its message in the dialog, which stays open.

import { $ } from "./dom.js";

// What to do when the API says the token no longer works (set by app.js: sign out).
const hooks = { unauthorized: () => {} };
export function onUnauthorized(handler) {
  hooks.unauthorized = handler;
}

// The pending ask of each dialog: a dialog reopened before its last "close" event arrived (events
// are delivered later) first ends the earlier ask, and that late event is then ignored.
const pending = new Map();

export function ask(id, { prepare, submit }) {
  const dialog = $(id);
  const form = dialog.querySelector("form");
  const error = dialog.querySelector(".dialog-error");
  if (pending.has(dialog)) pending.get(dialog)(null);
  form.reset();
  if (error) error.textContent = "";
  if (prepare) prepare(dialog);
  return new Promise((resolve) => {
    const finish = (value) => {
      if (pending.get(dialog) !== finish) return;
      pending.delete(dialog);
      form.removeEventListener("submit", onSubmit);
      dialog.removeEventListener("close", onClose);
      dialog.removeEventListener("cancel", onCancel);
      if (dialog.open) dialog.close();
      resolve(value);
    };
    const onSubmit = async (event) => {
      event.preventDefault();
      const buttons = [...form.querySelectorAll("button")];
      buttons.forEach((b) => (b.disabled = true));
      try {
        const value = await submit(dialog);
        finish(value);
      } catch (err) {
        if (err && err.status === 401) {
          finish(null);
          hooks.unauthorized(err);
          return;
        }
        if (error) error.textContent = err && err.message ? err.message : String(err);
      } finally {
        buttons.forEach((b) => (b.disabled = false));
      }
    };
    const onClose = () => {
      if (!dialog.open) finish(null);
    };
    // Escape: end the ask at once (the "close" event would come later), so whatever the dialog
    // showed is gone before anything else runs.
    const onCancel = (event) => {
      event.preventDefault();
      finish(null);
    };
    pending.set(dialog, finish);
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener("close", onClose);
    dialog.addEventListener("cancel", onCancel);
    dialog.showModal();
  });
}

export function confirmAction(title, text, okLabel, action) {
  return ask("dlg-confirm", {
    prepare: () => {
      $("dlg-confirm-title").textContent = title;
      $("dlg-confirm-text").textContent = text;
      $("dlg-confirm-ok").textContent = okLabel;
    },
    submit: action,
  });
}

export function showSecret(title, secret) {
  return ask("dlg-secret", {
    prepare: () => {
      $("dlg-secret-title").textContent = title;
      $("dlg-secret-value").value = secret;
      setTimeout(() => $("dlg-secret-value").select(), 0);
    },
    submit: () => true,
  }).finally(() => {
    $("dlg-secret-value").value = "";
  });
}


export function closeAll() {
  for (const finish of [...pending.values()]) finish(null);
  for (const dialog of document.querySelectorAll("dialog")) {
    dialog.querySelector("form").reset();
    if (dialog.open) dialog.close();
  }
  $("dlg-secret-value").value = "";
}

export function wireDialogs() {
  for (const b of document.querySelectorAll("dialog [data-close]")) {
    b.addEventListener("click", () => {
      const dialog = b.closest("dialog");
      if (pending.has(dialog)) pending.get(dialog)(null);
      else dialog.close();
    });
  }
  $("dlg-secret-copy").addEventListener("click", () => {
    navigator.clipboard.writeText($("dlg-secret-value").value).catch(() => $("dlg-secret-value").select());
  });
}
