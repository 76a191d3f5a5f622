// Bar charts drawn as SVG by our own code: per-day bars, stacked by series. No library: two chart
// shapes are ~150 lines here, render under the strict CSP (attributes only, no inline style), stay
// crisp at any width (drawn at the container's pixel width, redrawn when it changes), and every bar
// carries a <title> with its exact figure. docs/admin-api.md says more about the choice.

import { el, svg } from "./dom.js";

const HEIGHT = { normal: 220, small: 150 };
const PAD = { top: 10, right: 8, bottom: 22, left: 52 };
export const MAX_SERIES = 8;

// A "nice" axis maximum and step for a data maximum (1, 2, 2.5 or 5 times a power of ten).
function axis(max, ticks) {
  if (!(max > 0)) return { top: 1, step: 0.25 };
  const raw = max / ticks;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
  return { top: step * Math.ceil(max / step), step };
}

// series: [{name, values: number[] (one per label)}]; format(value) -> axis/tooltip text.
export function barChart(container, { labels, series, format, size = "normal", describe }) {
  const totals = labels.map((_, i) => series.reduce((sum, s) => sum + (s.values[i] || 0), 0));
  container.replaceChildren();
  if (!totals.some((t) => t > 0)) {
    container.append(el("p", "No usage in this period.", { class: "empty" }));
    return;
  }
  const width = Math.max(240, Math.floor(container.clientWidth || 640));
  const height = HEIGHT[size];
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const { top, step } = axis(Math.max(...totals), 4);
  const y = (v) => PAD.top + plotH - (v / top) * plotH;
  const slot = plotW / labels.length;
  const barW = Math.max(1, Math.min(28, slot * 0.7));

  const root = svg("svg", {
    width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": describe || "bar chart",
  });
  const grid = svg("g", { class: "grid" });
  const yAxis = svg("g", { class: "axis" });
  for (let v = 0; v <= top + step / 2; v += step) {
    grid.append(svg("line", { x1: PAD.left, x2: width - PAD.right, y1: y(v), y2: y(v) }));
    yAxis.append(svg("text", { x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, format(v)));
  }
  root.append(grid, yAxis);

  const bars = svg("g", { class: "bars" });
  labels.forEach((label, i) => {
    const x = PAD.left + i * slot + (slot - barW) / 2;
    let base = 0;
    series.forEach((s, k) => {
      const value = s.values[i] || 0;
      if (value <= 0) return;
      const rect = svg("rect", {
        x, width: barW, y: y(base + value), height: Math.max(0.5, y(base) - y(base + value)),
        class: "s" + (k % MAX_SERIES), "data-label": label, "data-series": s.name,
      });
      rect.append(svg("title", {}, `${label} · ${s.name}: ${format(value)}`));
      bars.append(rect);
      base += value;
    });
  });
  root.append(bars);

  const xAxis = svg("g", { class: "axis" });
  xAxis.append(svg("line", { x1: PAD.left, x2: width - PAD.right, y1: y(0), y2: y(0) }));
  const every = Math.ceil(labels.length / Math.max(1, Math.floor(plotW / 34)));
  labels.forEach((label, i) => {
    if (i % every) return;
    const x = PAD.left + i * slot + slot / 2;
    xAxis.append(svg("text", { x, y: height - 6, "text-anchor": "middle" }, label.slice(-2)));
  });
  root.append(xAxis);
  container.append(root);
}

export function legend(list, names) {
  list.replaceChildren(
    ...names.map((name, k) => {
      const item = el("li");
      item.append(el("span", null, { class: "swatch s" + (k % MAX_SERIES), "aria-hidden": "true" }), name);
      return item;
    }),
  );
}

// A small horizontal bar of parts (spent / held / free), each a share of the whole.
export function partsBar(parts, label, cls) {
  const total = parts.reduce((sum, p) => sum + Math.max(0, p.value), 0) || 1;
  const root = svg("svg", { class: cls, viewBox: "0 0 100 6", preserveAspectRatio: "none", role: "img", "aria-label": label });
  let x = 0;
  for (const part of parts) {
    const w = (Math.max(0, part.value) / total) * 100;
    if (w <= 0) continue;
    root.append(svg("rect", { x, y: 0, width: w, height: 6, class: part.cls }));
    x += w;
  }
  root.append(svg("title", {}, label));
  return root;
}
