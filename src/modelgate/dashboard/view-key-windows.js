// Spend windows on each key of the keys view: a bar per window with a cap (the key's 5 h, day and
// week, and its account's windows: all its keys together) showing spent, held and left, and when
// the window frees credit. Fetched (GET /keys/{id}/windows) only for keys that have a window cap.

import { api } from "./api.js";
import { partsBar } from "./chart.js";
import { credits, el, when } from "./dom.js";

const NAMES = { "5h": "5 hours", day: "day", week: "week", month: "month" };
const KEY_WINDOWS = ["5h", "day", "week"];

export function hasWindows(k) {
  return Boolean(k.caps_uc) && KEY_WINDOWS.some((w) => k.caps_uc[w] !== null);
}

// A box that fills with the key's window bars once they are read (empty for a key without one).
export function windowBars(k) {
  const box = el("div", null, { class: "windows", "data-windows": k.id });
  if (!hasWindows(k)) return box;
  api("GET", `/keys/${encodeURIComponent(k.id)}/windows`)
    .then((w) => {
      const bars = KEY_WINDOWS.filter((name) => w.caps[name] && w.caps[name].limit_uc !== null).map((name) => bar(name, w.caps[name], ""));
      for (const [name, win] of Object.entries(w.account_caps)) bars.push(bar(name, win, "account "));
      box.replaceChildren(...bars);
    })
    .catch(() => box.replaceChildren(el("span", "windows could not be read", { class: "muted" })));
  return box;
}

function bar(name, w, scope) {
  const label = `${scope}${NAMES[name]}`;
  const resets = w.resets_at ? `, frees ${when(w.resets_at)} UTC` : "";
  const text = `${label}: ${credits(w.spent_uc)} of ${credits(w.limit_uc)} spent, ${credits(w.held_uc)} held, ${credits(w.remaining_uc)} left${resets}`;
  const row = el("div", null, { class: "window", "data-window": `${scope}${name}`, title: text });
  row.append(
    partsBar([{ value: w.spent_uc, cls: "spent" }, { value: w.held_uc, cls: "held" }, { value: w.remaining_uc, cls: "free" }], text, "capbar"),
    el("span", `${label} ${credits(w.spent_uc)} / ${credits(w.limit_uc)}`, { class: "capfig" }),
    el("span", `${credits(w.remaining_uc)} left${resets}`, { class: "id" }),
  );
  return row;
}
