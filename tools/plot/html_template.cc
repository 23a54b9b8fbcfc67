// The interactive page: hand-written CSS + JS drawing SVG, no external resources (it must
// open from disk with no network).
// NOTE [Page script]: the script reads the JSON of
// page_data() (NOTE [Page data] in plot_data.cc) from #plot-data. Its unit choice, tick and
// stacking functions mirror plot_data.cc (which the unit tests check); keep them in step.
// When it has drawn, it sets <body data-chart-status="drawn">; any script error or
// console.error sets "error" and lists the message in #errors (the browser test reads both).
#include "tools/plot/plot.h"

namespace fullshard::plot {

const char* const kHtmlTemplate = R"FSHTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 16px 20px; color: #222; background: #fff; }
h1 { font-size: 18px; margin: 0 0 6px; }
.report { margin: 2px 0; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -2px; margin-right: 4px; border: 1px solid rgba(0,0,0,.25); }
.line-swatch { display: inline-block; width: 22px; height: 0; vertical-align: 3px; margin-right: 4px; border-top: 2px solid #000; }
#controls { margin: 10px 0 6px; display: flex; flex-wrap: wrap; gap: 6px 16px; align-items: center; }
#controls button { font: inherit; padding: 1px 8px; }
.hint { color: #777; }
#legend { margin: 4px 0 8px; display: flex; flex-wrap: wrap; gap: 4px 14px; }
#legend label { cursor: pointer; user-select: none; }
#legend .off { opacity: .35; text-decoration: line-through; }
.panel-title { font-weight: 600; margin: 8px 0 0; }
svg.chart { display: block; cursor: crosshair; }
svg.chart.dragging { cursor: grabbing; }
.axis text { font-size: 11px; fill: #444; }
.axis line, .grid line { stroke: #ddd; }
.axis path { stroke: #888; fill: none; }
.area { stroke: none; }
.allocated { fill: none; stroke: #111; stroke-width: 1.2; }
.reserved { fill: none; stroke: #666; stroke-width: 1.2; stroke-dasharray: 5 3; }
.capacity { stroke: #d62728; stroke-width: 1.5; stroke-dasharray: 8 4; }
.capacity-label { fill: #d62728; font-size: 11px; }
.ck-save { fill: #444; } .ck-write { fill: #aaa; } .ck-label { fill: #444; font-size: 10px; }
.routed { fill: none; stroke: #9467bd; stroke-width: 1.6; stroke-dasharray: 2 2; }
.a2a { fill: #8c564b; }
.peak-line { stroke: #111; stroke-width: 1; stroke-dasharray: 2 2; }
.peak-label { font-size: 11px; font-weight: 600; }
.oom-label { fill: #d62728; font-size: 12px; font-weight: 700; }
.peak-label, .oom-label, .capacity-label, .ck-label { paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
.crosshair { stroke: #333; stroke-width: 1; pointer-events: none; }
#tooltip { position: fixed; pointer-events: none; background: rgba(255,255,255,.97); border: 1px solid #999; border-radius: 4px;
  padding: 6px 8px; font-size: 12px; box-shadow: 0 2px 6px rgba(0,0,0,.2); max-width: 460px; z-index: 10; }
#tooltip table, .peak table { border-collapse: collapse; }
#tooltip td, .peak td { padding: 0 6px 0 0; }
#tooltip td.num, .peak td.num { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: #777; }
#peaks { display: flex; flex-wrap: wrap; gap: 12px; margin-top: 10px; }
.peak { border: 1px solid #ccc; border-radius: 4px; padding: 8px 10px; min-width: 320px; }
.peak h3 { font-size: 13px; margin: 0 0 4px; }
.oom { color: #d62728; font-weight: 600; }
#errors { color: #d62728; white-space: pre-wrap; }
</style>
</head>
<body data-chart-status="loading">
<h1>__TITLE__</h1>
<div id="reports"></div>
<noscript>This page draws with JavaScript; for a static picture use <code>fullshard plot REPORT.json -o OUT.svg</code>.</noscript>
<div id="controls">
  <label>rank class <select id="series"></select></label>
  <label id="layout-wrap" hidden>reports <select id="layout"><option value="overlay">overlaid</option><option value="panels">side by side</option></select></label>
  <label><input type="checkbox" id="show-reserved" checked> reserved</label>
  <label id="fit-wrap"><input type="checkbox" id="fit-capacity"> y axis to capacity</label>
  <span><button id="zoom-in" title="zoom in">+</button> <button id="zoom-out" title="zoom out">&minus;</button> <button id="zoom-peak">peak</button> <button id="zoom-reset">reset zoom</button></span>
  <span class="hint">wheel: zoom &middot; drag: pan &middot; double-click: reset &middot; click a category to hide it</span>
</div>
<div id="legend"></div>
<div id="charts"></div>
<div id="peaks"></div>
<div id="errors" hidden></div>
<div id="tooltip" hidden></div>
<script type="application/json" id="plot-data">__DATA__</script>
<script>
"use strict";
(function () {
  const body = document.body;
  const errors = document.getElementById("errors");
  function fail(msg) {
    body.dataset.chartStatus = "error";
    errors.hidden = false;
    errors.textContent += msg + "\n";
  }
  window.addEventListener("error", function (ev) { fail("script error: " + ev.message); });
  const consoleError = console.error;
  console.error = function () {
    fail("console.error: " + Array.prototype.join.call(arguments, " "));
    consoleError.apply(console, arguments);
  };

  const NS = "http://www.w3.org/2000/svg";
  const OVERLAY_COLORS = ["#111111", "#d6008f", "#0050b5", "#008a3e", "#8a5a00", "#5e35b1"];
  const D = JSON.parse(document.getElementById("plot-data").textContent);
  const reports = D.reports;

  // ---- units, ticks, formatting (mirror plot_data.cc) ----
  const KiB = 1024, MiB = 1024 * 1024, GiB = 1024 * 1024 * 1024;
  function byteUnit(max) {
    if (max >= GiB) return { name: "GiB", scale: GiB };
    if (max >= MiB) return { name: "MiB", scale: MiB };
    if (max >= KiB) return { name: "KiB", scale: KiB };
    return { name: "B", scale: 1 };
  }
  function timeUnit(span) {
    if (span >= 1) return { name: "s", scale: 1 };
    if (span >= 1e-3) return { name: "ms", scale: 1e-3 };
    return { name: "\u00b5s", scale: 1e-6 };
  }
  function niceTicks(lo, hi, target) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / target, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    let step = mag;
    for (const m of [1, 2, 5, 10]) if (raw <= m * mag * (1 + 1e-9)) { step = m * mag; break; }
    const out = [];
    for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }
  function fmtBytes(b) {
    const u = byteUnit(b);
    if (u.name === "B") return Math.round(b) + " B";
    return (b / u.scale).toFixed(u.name === "GiB" ? 2 : 1) + " " + u.name;
  }
  function fmtTime(s) {
    const u = timeUnit(Math.abs(s));
    return (s / u.scale).toFixed(u.name === "\u00b5s" ? 1 : 3) + " " + u.name;
  }
  function fmtTick(v, step) {
    const d = Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
    return v.toFixed(d);
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]; });
  }
  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  // ---- data: seconds, and the helpers a series needs ----
  for (const r of reports) {
    r.series.forEach(function (s, i) {
      s.index = i;
      s.report = r;
      s.ts = Float64Array.from(s.t, function (x) { return x / 1e9; });
      s.end = s.ts.length ? s.ts[s.ts.length - 1] : 0;
    });
  }
  // Last point at or before t (the state then), or -1.
  function at(s, t) {
    let lo = 0, hi = s.ts.length - 1, ans = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (s.ts[mid] <= t) { ans = mid; lo = mid + 1; } else hi = mid - 1;
    }
    return ans;
  }
  // The series of report r to show with series s of the first report (same rank, else same
  // position); mirrors matching_series() in plot_data.cc.
  function matching(r, s, pos) {
    if (s.ranks.length)
      for (const c of r.series) if (c.ranks.indexOf(s.ranks[0]) >= 0) return c;
    return pos < r.series.length ? r.series[pos] : null;
  }

  // ---- state ----
  const state = { sel: D.initial_series || 0, layout: "overlay", hidden: {}, reserved: true, fitCapacity: false, view: null };
  const sameScenario = reports.every(function (r) { return r.scenario === reports[0].scenario; });
  state.layout = reports.length > 1 && !sameScenario ? "panels" : "overlay";

  // ---- header, controls ----
  const reportsDiv = document.getElementById("reports");
  reports.forEach(function (r, i) {
    const d = document.createElement("div");
    d.className = "report";
    const cap = r.capacity > 0 ? ", capacity " + fmtBytes(r.capacity) + " per rank" : "";
    const ws = r.world_size > 0 ? ", " + r.world_size + " ranks" : "";
    d.innerHTML = (reports.length > 1 ? '<span class="line-swatch" style="border-color:' + OVERLAY_COLORS[i % OVERLAY_COLORS.length] + '"></span>' : "") +
      "<b>" + esc(r.label) + "</b>" + (r.scenario ? " &middot; " + esc(r.scenario) : "") + esc(ws + cap) +
      (r.summary ? ' <span class="muted">(' + esc(r.summary) + ")</span>" : "");
    reportsDiv.appendChild(d);
  });
  const sel = document.getElementById("series");
  reports[0].series.forEach(function (s, i) {
    const o = document.createElement("option");
    o.value = i;
    o.textContent = s.label + " \u2014 peak " + fmtBytes(s.peak.a) + (s.oom ? " (OOM)" : "");
    sel.appendChild(o);
  });
  sel.value = state.sel;
  sel.addEventListener("change", function () { state.sel = +sel.value; render(); });
  const layout = document.getElementById("layout");
  if (reports.length > 1) document.getElementById("layout-wrap").hidden = false;
  layout.value = state.layout;
  layout.addEventListener("change", function () { state.layout = layout.value; render(); });
  document.getElementById("show-reserved").addEventListener("change", function (e) { state.reserved = e.target.checked; render(); });
  document.getElementById("fit-capacity").addEventListener("change", function (e) { state.fitCapacity = e.target.checked; render(); });
  document.getElementById("zoom-in").addEventListener("click", function () { zoomBy(0.5, null); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoomBy(2, null); });
  document.getElementById("zoom-reset").addEventListener("click", function () { state.view = null; render(); });
  document.getElementById("zoom-peak").addEventListener("click", function () {
    const s = panels()[0].series, full = fullDomain(), w = (full[1] - full[0]) * 0.04;
    state.view = clampView([s.peak.t - w, s.peak.t + w]);
    render();
  });

  // ---- what to draw ----
  function panels() {
    const first = reports[0].series[state.sel];
    const list = [];
    if (state.layout === "overlay") {
      const over = [];
      for (let i = 1; i < reports.length; ++i) {
        const m = matching(reports[i], first, state.sel);
        if (m) over.push({ series: m, color: OVERLAY_COLORS[i % OVERLAY_COLORS.length] });
      }
      list.push({ series: first, overlays: over });
    } else {
      reports.forEach(function (r, i) {
        const m = i === 0 ? first : matching(r, first, state.sel);
        if (m) list.push({ series: m, overlays: [] });
      });
    }
    return list;
  }
  function fullDomain() {
    let end = 0;
    for (const p of panels()) {
      end = Math.max(end, p.series.end);
      for (const o of p.overlays) end = Math.max(end, o.series.end);
    }
    return [0, end > 0 ? end : 1];
  }
  function clampView(v) {
    const full = fullDomain(), span = full[1] - full[0];
    let w = Math.min(Math.max(v[1] - v[0], span * 1e-6), span);
    let a = Math.min(Math.max(v[0], full[0]), full[1] - w);
    return [a, a + w];
  }
  function zoomBy(f, anchor) {
    const v = state.view || fullDomain();
    const c = anchor === null ? (v[0] + v[1]) / 2 : anchor;
    state.view = clampView([c - (c - v[0]) * f, c + (v[1] - c) * f]);
    render();
  }

  // ---- legend (categories of the shown series; click toggles) ----
  function drawLegend(ps) {
    const legend = document.getElementById("legend");
    legend.innerHTML = "";
    const seen = {};
    for (const p of ps)
      for (const c of p.series.cats)
        if (!seen[c.key]) {
          seen[c.key] = true;
          const lab = document.createElement("label");
          lab.className = "cat" + (state.hidden[c.key] ? " off" : "");
          lab.dataset.key = c.key;
          lab.innerHTML = '<span class="swatch" style="background:' + c.color + '"></span>' + esc(c.key);
          lab.addEventListener("click", function () { state.hidden[c.key] = !state.hidden[c.key]; render(); });
          legend.appendChild(lab);
        }
    const lines = [["allocated", "#111", "solid"], ["reserved", "#666", "dashed"], ["capacity", "#d62728", "dashed"]];
    if (ps.some(function (p) { return p.series.rt; })) lines.push(["routed tokens (sized by the router)", "#9467bd", "dotted"]);
    for (const l of lines) {
      const s = document.createElement("span");
      s.innerHTML = '<span class="line-swatch" style="border-top:2px ' + l[2] + " " + l[1] + '"></span>' + l[0];
      legend.appendChild(s);
    }
    if (ps.some(function (p) { return p.series.a2a; })) {
      const s = document.createElement("span");
      s.innerHTML = '<span class="swatch" style="background:#8c564b"></span>all-to-all (lane at the top)';
      legend.appendChild(s);
    }
  }

  // ---- one chart ----
  function stepPath(ts, ys, i0, i1, x, y) {
    let d = "M" + x(ts[i0]).toFixed(1) + "," + y(ys[i0]).toFixed(1);
    for (let i = i0 + 1; i <= i1; ++i) d += "H" + x(ts[i]).toFixed(1) + "V" + y(ys[i]).toFixed(1);
    return d;
  }
  function areaPath(ts, top, bottom, i0, i1, x, y) {
    let d = stepPath(ts, top, i0, i1, x, y);
    d += "V" + y(bottom[i1]).toFixed(1);
    for (let i = i1; i > i0; --i) d += "H" + x(ts[i]).toFixed(1) + "V" + y(bottom[i - 1]).toFixed(1);
    return d + "H" + x(ts[i0]).toFixed(1) + "Z";
  }
  function yMax(ps) {
    let m = 0, cap = 0;
    for (const p of ps) {
      const all = [p.series].concat(p.overlays.map(function (o) { return o.series; }));
      for (const s of all) {
        m = Math.max(m, s.peak.a);
        for (const v of s.a) m = Math.max(m, v);
        if (state.reserved && s.r) for (const v of s.r) m = Math.max(m, v);
        cap = Math.max(cap, s.report.capacity);
      }
    }
    // The capacity line is in range when asked for, or when it is close enough to matter.
    const withCap = cap > 0 && (state.fitCapacity || cap <= 1.5 * m);
    return { max: Math.max(withCap ? cap : m, 1) * 1.06, cap: cap, capShown: withCap };
  }

  function drawPanel(container, p, view, ym, title) {
    const s = p.series;
    const width = Math.max(640, container.clientWidth || 1000), height = 380;
    const m = { l: 72, r: 16, t: 18, b: 38 };
    const W = width - m.l - m.r, H = height - m.t - m.b;
    const svg = el("svg", { class: "chart", width: width, height: height, viewBox: "0 0 " + width + " " + height });
    if (title) {
      const h = document.createElement("div");
      h.className = "panel-title";
      h.textContent = title;
      container.appendChild(h);
    }
    container.appendChild(svg);
    const x = function (t) { return m.l + (t - view[0]) / (view[1] - view[0]) * W; };
    const y = function (b) { return m.t + H - b / ym.max * H; };
    const clipId = "clip" + (drawPanel.n = (drawPanel.n || 0) + 1);
    el("rect", { x: m.l, y: m.t, width: W, height: H }, el("clipPath", { id: clipId }, el("defs", {}, svg)));
    // axes and grid
    const bu = byteUnit(ym.max / 1.06), tu = timeUnit(view[1] - view[0]);
    const grid = el("g", { class: "grid" }, svg), axis = el("g", { class: "axis" }, svg);
    const yt = niceTicks(0, ym.max / bu.scale, 6);
    const ystep = yt.length > 1 ? yt[1] - yt[0] : 1;
    for (const v of yt) {
      const py = y(v * bu.scale);
      if (py < m.t - 0.5) continue;
      el("line", { x1: m.l, x2: m.l + W, y1: py, y2: py }, grid);
      el("text", { x: m.l - 6, y: py + 4, "text-anchor": "end" }, axis).textContent = fmtTick(v, ystep);
    }
    const xt = niceTicks(view[0] / tu.scale, view[1] / tu.scale, Math.max(4, Math.round(W / 110)));
    const xstep = xt.length > 1 ? xt[1] - xt[0] : 1;
    for (const v of xt) {
      const px = x(v * tu.scale);
      el("line", { x1: px, x2: px, y1: m.t, y2: m.t + H }, grid);
      el("text", { x: px, y: m.t + H + 15, "text-anchor": "middle" }, axis).textContent = fmtTick(v, xstep);
    }
    el("path", { d: "M" + m.l + "," + m.t + "V" + (m.t + H) + "H" + (m.l + W) }, axis);
    el("text", { x: m.l + W / 2, y: height - 4, "text-anchor": "middle" }, axis).textContent = "time (" + tu.name + ")";
    el("text", { x: 14, y: m.t + H / 2, "text-anchor": "middle", transform: "rotate(-90 14 " + (m.t + H / 2) + ")" }, axis).textContent = "memory (" + bu.name + ")";

    const plot = el("g", { "clip-path": "url(#" + clipId + ")" }, svg);
    const n = s.ts.length;
    if (n > 0) {
      const i0 = Math.max(0, at(s, view[0])), i1 = Math.min(n - 1, Math.max(i0, at(s, view[1]) + 1));
      // stacked areas
      let below = new Float64Array(n);
      for (const c of s.cats) {
        if (state.hidden[c.key]) continue;
        const top = new Float64Array(n);
        for (let i = 0; i < n; ++i) top[i] = below[i] + c.v[i];
        el("path", { class: "area", "data-key": c.key, fill: c.color, d: areaPath(s.ts, top, below, i0, i1, x, y) }, plot);
        below = top;
      }
      if (state.reserved && s.r) el("path", { class: "reserved", d: stepPath(s.ts, s.r, i0, i1, x, y) }, plot);
      el("path", { class: "allocated", d: stepPath(s.ts, s.a, i0, i1, x, y) }, plot);
      if (s.rt) el("path", { class: "routed", d: stepPath(s.ts, s.rt, i0, i1, x, y) }, plot);
    }
    for (const o of p.overlays) {
      const os = o.series, k = os.ts.length;
      if (!k) continue;
      const j0 = Math.max(0, at(os, view[0])), j1 = Math.min(k - 1, Math.max(j0, at(os, view[1]) + 1));
      if (state.reserved && os.r)
        el("path", { class: "reserved overlay", style: "stroke:" + o.color, d: stepPath(os.ts, os.r, j0, j1, x, y) }, plot);
      el("path", { class: "allocated overlay", style: "stroke:" + o.color + ";stroke-width:1.8", d: stepPath(os.ts, os.a, j0, j1, x, y) }, plot);
    }
    // the checkpoint lane: each played save's write (light) and the host's wait (dark)
    if (s.report.ck) {
      for (const c of s.report.ck) {
        const w = el("rect", { class: "ck-write", x: x(c[2]), y: m.t, width: Math.max(1, x(c[3]) - x(c[2])), height: 8 }, plot);
        el("title", {}, w).textContent = "checkpoint write after step " + c[4] + ": " + fmtTime(c[3] - c[2]);
        const h = el("rect", { class: "ck-save", x: x(c[0]), y: m.t, width: Math.max(1, x(c[1]) - x(c[0])), height: 8 }, plot);
        el("title", {}, h).textContent = "checkpoint save after step " + c[4] + ": training waits " + fmtTime(c[1] - c[0]);
      }
      el("text", { class: "ck-label", x: m.l + W - 4, y: m.t + 19, "text-anchor": "end" }, svg).textContent = "checkpoint";
    }
    // the all-to-all lane: expert parallelism's dispatch / combine spans (under the checkpoint lane)
    if (s.a2a) {
      const ay = m.t + (s.report.ck ? 22 : 0);
      for (const c of s.a2a) {
        if (c[1] < view[0] || c[0] > view[1]) continue;
        const r = el("rect", { class: "a2a", x: x(c[0]), y: ay, width: Math.max(1, x(c[1]) - x(c[0])), height: 6 }, plot);
        el("title", {}, r).textContent = c[2] + ": " + fmtTime(c[1] - c[0]);
      }
      el("text", { class: "ck-label", x: m.l + W - 4, y: ay + 17, "text-anchor": "end" }, svg).textContent = "all-to-all";
    }
    if (ym.capShown && s.report.capacity > 0) {
      const cy = y(s.report.capacity);
      el("line", { class: "capacity", x1: m.l, x2: m.l + W, y1: cy, y2: cy }, svg);
      el("text", { class: "capacity-label", x: m.l + 6, y: cy - 4 }, svg).textContent = "capacity " + fmtBytes(s.report.capacity);
    } else if (ym.cap > 0) {
      el("text", { class: "capacity-label", x: m.l + 6, y: m.t + 12 }, svg).textContent = "capacity " + fmtBytes(ym.cap) + " (off scale)";
    }
    // the peak (and the out-of-memory point)
    const pk = [s].concat(p.overlays.map(function (o) { return o.series; }));
    pk.forEach(function (ps, k) {
      if (!(ps.peak.a > 0) || ps.peak.t < view[0] || ps.peak.t > view[1]) return;
      const px = x(ps.peak.t), py = y(ps.peak.a);
      const g = el("g", { class: "peak-marker" }, svg);
      if (k === 0) g.classList.add("primary");
      el("line", { class: "peak-line", x1: px, x2: px, y1: py, y2: m.t + H }, g);
      el("circle", { cx: px, cy: py, r: 4, fill: k === 0 ? "#111" : p.overlays[k - 1].color }, g);
      const right = px < m.l + W * 0.7;
      el("text", { class: "peak-label", x: px + (right ? 7 : -7), y: Math.max(m.t + 11, py - 6 - 13 * k), "text-anchor": right ? "start" : "end",
        fill: k === 0 ? "#111" : p.overlays[k - 1].color }, g).textContent =
        "peak " + fmtBytes(ps.peak.a) + (pk.length > 1 ? " (" + ps.report.label + ")" : "");
    });
    if (s.oom && n) {
      const px = Math.min(x(s.end), m.l + W - 2);
      el("line", { class: "capacity", x1: px, x2: px, y1: m.t, y2: m.t + H }, svg);
      el("text", { class: "oom-label", x: px - 6, y: m.t + H * 0.45, "text-anchor": "end" }, svg).textContent = "OUT OF MEMORY";
    }
    // interaction layer
    const cross = el("line", { class: "crosshair", y1: m.t, y2: m.t + H, x1: -10, x2: -10 }, svg);
    const hit = el("rect", { x: m.l, y: m.t, width: W, height: H, fill: "transparent" }, svg);
    return { svg: svg, hit: hit, cross: cross, x: x, m: m, W: W, panel: p, view: view };
  }

  // ---- hover ----
  const tip = document.getElementById("tooltip");
  function rowsFor(s, i) {
    const r = s.report;
    let h = "";
    const name = function (col) { return s[col] && s[col][i] >= 0 ? r.names[s[col][i]] : ""; };
    const what = name("what"), op = name("op");
    if (what) h += "<tr><td>" + (s.ev ? (s.ev[i] === "f" ? "freed" : "allocated") : "event") + "</td><td>" + esc(what) + "</td></tr>";
    if (op) {
      h += "<tr><td>op</td><td>" + esc(op) + "</td></tr>";
      const mod = r.modules[s.op[i]];
      if (mod) h += "<tr><td>module</td><td>" + esc(mod) + "</td></tr>";
    } else if (what && r.modules[s.what[i]]) {
      h += "<tr><td>module</td><td>" + esc(r.modules[s.what[i]]) + "</td></tr>";
    }
    h += '<tr><td>allocated</td><td class="num"><b>' + fmtBytes(s.a[i]) + "</b></td></tr>";
    if (s.r) h += '<tr><td>reserved</td><td class="num">' + fmtBytes(s.r[i]) + "</td></tr>";
    if (s.h) h += '<tr><td>CPU offloaded</td><td class="num">' + fmtBytes(s.h[i]) + "</td></tr>";
    if (s.rt) h += '<tr><td>routed tokens</td><td class="num">' + fmtBytes(s.rt[i]) + "</td></tr>";
    for (let k = s.cats.length - 1; k >= 0; --k) {
      const c = s.cats[k];
      if (!c.v[i] || state.hidden[c.key]) continue;
      h += '<tr><td><span class="swatch" style="background:' + c.color + '"></span>' + esc(c.key) + '</td><td class="num">' + fmtBytes(c.v[i]) + "</td></tr>";
    }
    return h;
  }
  // The point to describe under the cursor: the highest within +-1.5 px (so a spike narrower
  // than a pixel, like most peaks, can be hovered), else the state at t.
  function pick(s, t, dt) {
    const hi = at(s, t + dt);
    let best = at(s, t - dt);
    for (let i = Math.max(best, 0); i <= hi && i - best < 20000; ++i) if (best < 0 || s.a[i] > s.a[best]) best = i;
    return best;
  }
  function showTip(ev, charts) {
    const c0 = charts.find(function (c) { return c.hit === ev.target; }) || charts[0];
    const box = c0.svg.getBoundingClientRect();
    const px = ev.clientX - box.left;
    const t = c0.view[0] + (px - c0.m.l) / c0.W * (c0.view[1] - c0.view[0]);
    const dt = 1.5 / c0.W * (c0.view[1] - c0.view[0]);
    const s0 = charts[0].panel.series, i0 = pick(s0, t, dt);
    let h = "<b>" + fmtTime(i0 >= 0 && Math.abs(s0.ts[i0] - t) <= dt ? s0.ts[i0] : t) + "</b><table>";
    for (const c of charts) {
      c.cross.setAttribute("x1", c.x(t));
      c.cross.setAttribute("x2", c.x(t));
      const s = c.panel.series, i = pick(s, t, dt);
      if (charts.length > 1 || reports.length > 1) h += '<tr><td colspan="2"><b>' + esc(s.report.label) + "</b> " + esc(s.label) + "</td></tr>";
      h += i >= 0 ? rowsFor(s, i) : '<tr><td colspan="2" class="muted">before the first point</td></tr>';
      for (const o of c.panel.overlays) {
        const j = pick(o.series, t, dt);
        if (j < 0) continue;
        h += '<tr><td><span class="line-swatch" style="border-color:' + o.color + '"></span>' + esc(o.series.report.label) + '</td><td class="num">' +
          fmtBytes(o.series.a[j]) + (o.series.r ? " (reserved " + fmtBytes(o.series.r[j]) + ")" : "") + "</td></tr>";
        const ow = o.series.op && o.series.op[j] >= 0 ? o.series.report.names[o.series.op[j]] : "";
        if (ow) h += '<tr><td class="muted">op</td><td class="muted">' + esc(ow) + "</td></tr>";
      }
    }
    tip.innerHTML = h + "</table>";
    tip.hidden = false;
    const tw = tip.offsetWidth, th = tip.offsetHeight;
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tw - 8) + "px";
    tip.style.top = Math.max(8, Math.min(ev.clientY + 14, window.innerHeight - th - 8)) + "px";
  }

  // ---- peak cards ----
  function drawPeaks(ps) {
    const div = document.getElementById("peaks");
    div.innerHTML = "";
    const all = [];
    for (const p of ps) {
      all.push(p.series);
      for (const o of p.overlays) all.push(o.series);
    }
    for (const s of all) {
      const d = document.createElement("div");
      d.className = "peak";
      let h = "<h3>" + esc(s.report.label) + " &middot; " + esc(s.label) + ": peak allocated " + fmtBytes(s.peak.a) +
        " at " + fmtTime(s.peak.t) + (s.peak.r > 0 ? ", peak reserved " + fmtBytes(s.peak.r) : "") + "</h3>";
      if (s.oom) h += '<div class="oom">' + esc(s.oom) + "</div>";
      if (s.peak.breakdown.length) {
        h += "<table>";
        for (const b of s.peak.breakdown) {
          const c = s.cats.find(function (x) { return x.key === b[0]; });
          h += '<tr><td><span class="swatch" style="background:' + (c ? c.color : "#ccc") + '"></span>' + esc(b[0]) +
            '</td><td class="num">' + fmtBytes(b[1]) + '</td><td class="num muted">' + (100 * b[1] / s.peak.a).toFixed(1) + "%</td></tr>";
        }
        h += "</table>";
      }
      if (s.peak.moe) {
        h += "<div>of which mixture of experts:</div><table>";
        for (const b of s.peak.moe)
          h += "<tr><td>" + esc(b[0]) + '</td><td class="num">' + fmtBytes(b[1]) + '</td><td class="num muted">' + (100 * b[1] / s.peak.a).toFixed(1) + "%</td></tr>";
        h += "</table>";
      }
      if (s.peak.in_flight.length) {
        h += "<div>in flight at the peak:</div><table>";
        for (const f of s.peak.in_flight)
          h += "<tr><td>" + esc(f.stream) + "</td><td>" + esc(f.name) + '</td><td class="muted">' + fmtTime(f.start) + " \u2013 " + fmtTime(f.end) + "</td></tr>";
        h += "</table>";
      } else {
        const i = at(s, s.peak.t), op = s.op && i >= 0 && s.op[i] >= 0 ? s.report.names[s.op[i]] : "";
        h += op ? "<div>op at the peak: " + esc(op) + "</div>" : '<div class="muted">this report does not say which ops were running</div>';
      }
      d.innerHTML = h;
      div.appendChild(d);
    }
  }

  // ---- render ----
  let charts = [];
  let drag = null;  // outlives a render: panning re-renders under the mouse
  function render() {
    const container = document.getElementById("charts");
    container.innerHTML = "";
    const ps = panels();
    const view = state.view ? clampView(state.view) : fullDomain();
    const ym = yMax(ps);
    document.getElementById("fit-wrap").hidden = !(ym.cap > 0);
    drawLegend(ps);
    charts = ps.map(function (p) {
      const title = ps.length > 1 || reports.length > 1 ? p.series.report.label + " \u00b7 " + p.series.label : p.series.label;
      return drawPanel(container, p, view, ym, title);
    });
    drawPeaks(ps);
    for (const c of charts) {
      c.hit.addEventListener("mousemove", function (ev) {
        if (drag) {
          const dt = (ev.clientX - drag.x) / c.W * (drag.view[1] - drag.view[0]);
          state.view = clampView([drag.view[0] - dt, drag.view[1] - dt]);
          scheduleRender();
          return;
        }
        showTip(ev, charts);
      });
      c.hit.addEventListener("mouseleave", function () { tip.hidden = true; });
      c.hit.addEventListener("mousedown", function (ev) {
        drag = { x: ev.clientX, view: state.view ? clampView(state.view) : fullDomain() };
        c.svg.classList.add("dragging");
        ev.preventDefault();
      });
      c.hit.addEventListener("wheel", function (ev) {
        ev.preventDefault();
        const box = c.svg.getBoundingClientRect(), v = state.view ? clampView(state.view) : fullDomain();
        const t = v[0] + (ev.clientX - box.left - c.m.l) / c.W * (v[1] - v[0]);
        zoomBy(Math.exp(ev.deltaY * 0.0015), t);
      }, { passive: false });
      c.hit.addEventListener("dblclick", function () { state.view = null; render(); });
    }
    window.onmouseup = function () {
      drag = null;
      for (const c of charts) c.svg.classList.remove("dragging");
    };
    body.dataset.chartStatus = body.dataset.chartStatus === "error" ? "error" : "drawn";
    body.dataset.panels = charts.length;
  }
  let pending = false;
  function scheduleRender() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; render(); });
  }
  window.addEventListener("resize", scheduleRender);

  // Opened as page.html#selftest (the browser test): drive hover, zoom, pan and a category
  // toggle with synthetic events and report in <body data-selftest="pass" | "fail: ...">.
  function selfTest() {
    const bad = [];
    let c = charts[0];
    const s = c.panel.series, box = c.svg.getBoundingClientRect();
    const px = box.left + c.x(s.peak.t) + 0.5, py = box.top + c.m.t + 20;
    c.hit.dispatchEvent(new MouseEvent("mousemove", { clientX: px, clientY: py, bubbles: true }));
    const text = tip.textContent;
    if (tip.hidden || text.indexOf("allocated") < 0) bad.push("hover shows no tooltip");
    if (s.op && text.indexOf("op") < 0) bad.push("hover shows no op");
    if (text.indexOf(fmtBytes(s.peak.a)) < 0) bad.push("hover at the peak does not show " + fmtBytes(s.peak.a));
    const full = fullDomain();
    c.hit.dispatchEvent(new WheelEvent("wheel", { deltaY: -600, clientX: px, clientY: py, bubbles: true, cancelable: true }));
    const v = state.view;
    if (!v || !(v[1] - v[0] < (full[1] - full[0]) * 0.9)) bad.push("the wheel did not zoom in");
    c = charts[0];
    c.hit.dispatchEvent(new MouseEvent("mousedown", { clientX: px, clientY: py, bubbles: true }));
    c.hit.dispatchEvent(new MouseEvent("mousemove", { clientX: px - 100, clientY: py, bubbles: true }));
    window.onmouseup();
    if (!state.view || state.view[0] === v[0]) bad.push("dragging did not pan");
    state.view = null;
    render();
    const areas = function () { return document.querySelectorAll("#charts path.area").length; };
    const n0 = areas(), cat = document.querySelector("#legend label.cat");
    if (cat) {
      cat.click();
      if (areas() !== n0 - 1) bad.push("hiding a category did not remove its area");
      document.querySelector("#legend label.cat").click();
      if (areas() !== n0) bad.push("showing the category again did not bring its area back");
    }
    body.dataset.selftest = bad.length ? "fail: " + bad.join("; ") : "pass";
  }
  try {
    render();
    if (location.hash === "#selftest") selfTest();
  } catch (e) {
    fail("render failed: " + (e && e.stack ? e.stack : e));
  }
})();
</script>
</body>
</html>
)FSHTML";

}  // namespace fullshard::plot
