// Narwhal status page: polls /ui/api/series and /v1/decisions every
// second and draws plain SVG. No dependencies.
"use strict";

const NS = "http://www.w3.org/2000/svg";
const W = 480, H = 190, L = 40, R = 40, T = 18, B = 18;
const COLORS = { prefill: "#2563eb", decode: "#ea580c", moving: "#9ca3af", ttft: "#16a34a", tpot: "#9333ea" };

function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

function text(parent, x, y, s, anchor) {
  const t = el("text", { x: x, y: y, "text-anchor": anchor || "start" }, parent);
  t.textContent = s;
  return t;
}

function fmt(v) {
  if (!isFinite(v)) return "–";
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return (Math.round(v * 10) / 10).toString();
}

// chart draws series [{key, color, right, step}] of samples on svg.
function chart(svg, samples, series, opts) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  if (samples.length === 0) {
    text(svg, W / 2, H / 2, "waiting for data", "middle");
    return;
  }
  const t0 = samples[0].at_ns, t1 = samples[samples.length - 1].at_ns;
  const span = Math.max(t1 - t0, 1e9);
  const x = (t) => L + (W - L - R) * (t - t0) / span;
  const axes = {};
  for (const side of ["left", "right"]) {
    const keys = series.filter((s) => (s.right ? "right" : "left") === side).map((s) => s.key);
    if (keys.length === 0) continue;
    let max = opts.max || 0;
    if (!opts.max) for (const p of samples) for (const k of keys) if (isFinite(p[k])) max = Math.max(max, p[k]);
    if (max <= 0) max = 1;
    axes[side] = { max: max, y: (v) => T + (H - T - B) * (1 - v / max) };
  }
  for (let i = 0; i <= 4; i++) {
    const yy = T + (H - T - B) * i / 4;
    el("line", { x1: L, x2: W - R, y1: yy, y2: yy, class: "grid" }, svg);
    if (axes.left) text(svg, L - 4, yy + 4, fmt(axes.left.max * (1 - i / 4)), "end");
    if (axes.right) text(svg, W - R + 4, yy + 4, fmt(axes.right.max * (1 - i / 4)));
  }
  text(svg, L, H - 6, "-" + Math.round(span / 1e9) + " s");
  text(svg, W - R, H - 6, "now", "end");
  let lx = L + 6;
  for (const s of series) {
    const ax = axes[s.right ? "right" : "left"];
    let d = "", prev = null;
    for (const p of samples) {
      const v = p[s.key];
      if (!isFinite(v) || v < 0) { prev = null; continue; }
      const px = x(p.at_ns).toFixed(1), py = ax.y(v).toFixed(1);
      if (prev === null) d += "M" + px + " " + py;
      else if (s.step) d += "H" + px + "V" + py;
      else d += "L" + px + " " + py;
      prev = v;
    }
    if (d) el("path", { d: d, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.key }, svg);
    const label = s.label + (s.right ? " (right axis)" : "");
    el("rect", { x: lx, y: 4, width: 10, height: 4, fill: s.color }, svg);
    text(svg, lx + 13, 10, label);
    lx += 13 + 6.5 * label.length + 14;
  }
}

function pct(v) { return v >= 0 ? (100 * v).toFixed(1) + " %" : "–"; }

function cell(tr, s, cls) {
  const td = document.createElement("td");
  td.textContent = s;
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function renderDecisions(id, ds, t1) {
  const tbody = document.querySelector("#" + id + " tbody");
  tbody.textContent = "";
  for (const d of ds.slice().reverse()) {
    const tr = document.createElement("tr");
    tr.className = "decision " + d.action;
    const c = d.current || {};
    cell(tr, d.seq);
    cell(tr, t1 ? ((d.at_ns - t1) / 1e9).toFixed(0) + " s" : "");
    cell(tr, d.decision_basis);
    cell(tr, d.action);
    cell(tr, c.prefill_engines + " / " + c.decode_engines);
    cell(tr, fmt(c.prefill_pressure) + " / " + fmt(c.decode_pressure));
    cell(tr, (d.moves || []).map((m) => m.engine_id + " " + m.from + "→" + m.to).join(", "));
    cell(tr, d.blocked_gate || "", "gate");
    cell(tr, d.reason || "", "reason");
    tbody.appendChild(tr);
  }
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(url + ": HTTP " + r.status);
  return r.json();
}

async function tick() {
  const status = document.getElementById("status");
  try {
    const [series, decs] = await Promise.all([getJSON("/ui/api/series"), getJSON("/v1/decisions?limit=600")]);
    const s = series.samples || [];
    const ds = decs.decisions || [];
    const last = s.length ? s[s.length - 1] : null;
    if (last) {
      document.getElementById("split-prefill").textContent = last.prefill;
      document.getElementById("split-decode").textContent = last.decode;
      document.getElementById("split-moving").textContent = last.moving + " / " + last.down;
      document.getElementById("att-ttft").textContent = pct(last.ttft_met);
      document.getElementById("att-tpot").textContent = pct(last.tpot_met);
    }
    if (ds.length) {
      const d = ds[ds.length - 1];
      document.getElementById("latest").textContent = "#" + d.seq + " " + d.action + " (" + d.decision_basis + ")" + (d.blocked_gate ? ", blocked by " + d.blocked_gate : "");
    }
    chart(document.getElementById("chart-roles"), s, [
      { key: "prefill", label: "prefill", color: COLORS.prefill, step: true },
      { key: "decode", label: "decode", color: COLORS.decode, step: true },
      { key: "moving", label: "moving", color: COLORS.moving, step: true },
    ], {});
    chart(document.getElementById("chart-demand"), s, [
      { key: "prefill_tokens_per_s", label: "prefill", color: COLORS.prefill },
      { key: "decode_tokens_per_s", label: "decode", color: COLORS.decode, right: true },
    ], {});
    chart(document.getElementById("chart-attainment"), s.map((p) => Object.assign({}, p, {
      ttft: p.ttft_met >= 0 ? 100 * p.ttft_met : -1, tpot: p.tpot_met >= 0 ? 100 * p.tpot_met : -1,
    })), [
      { key: "ttft", label: "TTFT", color: COLORS.ttft },
      { key: "tpot", label: "TPOT", color: COLORS.tpot },
    ], { max: 100 });
    const t1 = last ? last.at_ns : 0;
    renderDecisions("decisions", ds.slice(-6), t1);
    renderDecisions("moves", ds.filter((d) => d.action !== "hold").slice(-10), t1);
    status.textContent = "live · " + s.length + " samples · updated " + new Date().toLocaleTimeString();
    status.className = "status";
    document.getElementById("main").dataset.ready = "1";
  } catch (e) {
    status.textContent = "error: " + e.message;
    status.className = "status err";
  }
}

tick();
setInterval(tick, 1000);
