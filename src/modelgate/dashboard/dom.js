// DOM helpers. Values from the server only ever go in through textContent, value and setAttribute
// of plain attributes: no HTML strings anywhere, so names and ids can never become markup.

export const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

export function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value === true ? "" : String(value));
  }
  return node;
}

export function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

export function button(label, onClick, attrs) {
  const b = el("button", label, { type: "button", ...(attrs || {}) });
  b.addEventListener("click", onClick);
  return b;
}

// A table cell: a string, a number (right-aligned), a node, or a list of nodes.
export function cell(value, cls) {
  const td = el("td", null, cls ? { class: cls } : undefined);
  if (value instanceof Node) td.append(value);
  else if (Array.isArray(value)) {
    // One box per cell, so the phone layout's label sits beside the whole value.
    const box = el("div");
    box.append(...value.filter((v) => v !== null && v !== undefined));
    td.append(box);
  }
  else td.textContent = value === null || value === undefined ? "" : String(value);
  return td;
}

// Rows into a table body. Each cell is labelled with its column's header (data-label), which the
// phone layout shows beside the value when rows become cards.
export function fill(tbody, rows, columns, emptyText) {
  if (rows.length) {
    const headers = [...tbody.closest("table").querySelectorAll("thead th")].map((th) => th.textContent.trim());
    for (const tr of rows) [...tr.children].forEach((td, i) => headers[i] && td.setAttribute("data-label", headers[i]));
    tbody.replaceChildren(...rows);
    return;
  }
  const tr = el("tr");
  tr.append(el("td", emptyText, { class: "empty", colspan: columns }));
  tbody.replaceChildren(tr);
}

// --- formatting ------------------------------------------------------------------------------

// Decimals that show a credit figure well on its own: fewer for large figures.
export function creditDigits(micro) {
  const value = Math.abs(micro / 1e6);
  return value >= 100 ? 2 : value >= 1 ? 3 : value === 0 ? 0 : 4;
}

// Credits from micro-credits; `digits` (optional) fixes the decimals, so figures shown side by
// side (the overview's balance and spend) share one precision.
export function credits(micro, digits) {
  if (micro === null || micro === undefined) return "—";
  const places = digits === undefined ? creditDigits(micro) : digits;
  return (micro / 1e6).toLocaleString("en-US", { minimumFractionDigits: places, maximumFractionDigits: places });
}

export function count(n) {
  return Number(n).toLocaleString("en-US");
}

export function compact(n) {
  return Number(n).toLocaleString("en-US", { notation: "compact", maximumFractionDigits: 1 });
}

// "2026-11-20T14:05:09Z" -> "2026-11-20 14:05"
export function when(iso) {
  return iso ? iso.slice(0, 16).replace("T", " ") : "—";
}

export function ago(iso, nowMs) {
  if (!iso) return "never";
  const seconds = Math.max(0, (nowMs - Date.parse(iso)) / 1000);
  if (seconds < 90) return "just now";
  if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
  if (seconds < 129600) return Math.round(seconds / 3600) + " h ago";
  return Math.round(seconds / 86400) + " days ago";
}

export function badge(state) {
  return el("span", state, { class: "badge " + state });
}
