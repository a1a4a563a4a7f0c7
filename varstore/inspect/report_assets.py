"""The report page's inline style sheet and script: paginated, sortable, filterable tables built from the page's JSON.

The script reads the JSON document in <script id="report-data">, writes every
name from it with `textContent` (never as markup), and pages each table
(PAGE_ROWS rows at a time), so a page of 5,000 variables builds only the rows
shown. It draws nothing: figures are matplotlib's images (report_figures.py),
set as an <img>'s data URL when a row is opened. Plain JavaScript, no library,
no request. Text only here; report_page.py assembles the page.
"""

from __future__ import annotations

__all__ = ["STYLE", "SCRIPT", "PAGE_ROWS"]

#: Rows per page of every table.
PAGE_ROWS = 50

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1440px;padding:0 16px 40px;color:#1d232a}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid #d6dbe1;padding-bottom:4px}
.sub{color:#5b6673;margin:0 0 10px}.note{background:#fff7e0;border:1px solid #e8d28a;padding:6px 10px;border-radius:4px;margin:6px 0}
.flags{background:#fdecea;border:1px solid #e6a39b;padding:8px 12px;border-radius:4px}.flags h2{border:0;margin:0 0 4px;color:#a82315}
.ok{background:#eaf6ec;border:1px solid #9fd3a8;padding:6px 12px;border-radius:4px}
table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 6px;border-bottom:1px solid #e4e7eb;text-align:left;vertical-align:top}
th{background:#f3f5f7;cursor:pointer;user-select:none;white-space:nowrap}td.n{text-align:right;white-space:nowrap}
td.name{font-family:ui-monospace,Menlo,Consolas,monospace;overflow-wrap:anywhere;min-width:16em;max-width:30em}
.tablewrap{overflow-x:auto;max-width:100%}.tablewrap table{font-size:13px}
tr.bad td{background:#fdecea}tr.row:hover td{background:#eef3fa;cursor:pointer}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #d6dbe1;border-radius:6px;padding:8px 12px;min-width:130px}
.card b{display:block;font-size:18px}.tools{margin:6px 0;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.tools input[type=search]{padding:3px 6px;width:260px}.pager button{margin:0 2px}
.gallery{display:flex;flex-wrap:wrap;gap:12px}.fig{border:1px solid #e4e7eb;border-radius:6px;padding:6px;width:410px}
.fig .cap{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
.detail td{background:#fafbfc}.detail pre{margin:4px 0;white-space:pre-wrap}
details.tree{margin-left:0}details.tree ul{padding-left:18px;margin:2px 0}details.tree>summary{cursor:pointer}.tree li{list-style:none;font-family:ui-monospace,Menlo,monospace;font-size:12px}
.size{color:#5b6673;font-family:system-ui,sans-serif}pre.meta{max-height:320px;overflow:auto;background:#f6f8fa;padding:8px}
img{max-width:100%}
"""

SCRIPT = r"""
"use strict";
const DATA = JSON.parse(document.getElementById("report-data").textContent);
const PAGE = %(page_rows)d;
function fmt(v) {
  if (v === null || v === undefined) return "\u2014";
  if (typeof v === "number") {
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    const a = Math.abs(v);
    return (a !== 0 && (a < 1e-3 || a >= 1e6)) ? v.toExponential(4) : String(Number(v.toPrecision(6)));
  }
  return String(v);
}
function pct(v) { return v === null ? "\u2014" : (100 * v).toPrecision(4) + " %%"; }
function key(v) {
  if (typeof v === "number") return v;
  if (v === "inf") return Infinity; if (v === "-inf") return -Infinity; if (v === "nan") return NaN;
  return v === null ? -Infinity : v;
}
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); return td; }
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }

function makeTable(id, columns, rows, opts) {
  const host = document.getElementById(id);
  if (!host) return;
  const state = {filter: "", sort: opts.sort === undefined ? -1 : opts.sort, desc: !!opts.desc, page: 0, open: -1};
  const tools = el("div", undefined, "tools");
  const search = el("input"); search.type = "search"; search.placeholder = "filter by name"; search.setAttribute("aria-label", "filter " + id);
  const only = opts.flagCol === undefined ? null : el("label");
  let onlyBox = null;
  if (only) { onlyBox = el("input"); onlyBox.type = "checkbox"; only.appendChild(onlyBox); only.appendChild(document.createTextNode(" NaN/Inf only")); }
  const pager = el("span", undefined, "pager");
  const prev = el("button", "\u2039 prev"), next = el("button", "next \u203a"), where = el("span");
  pager.append(prev, " ", where, " ", next);
  tools.append(search); if (only) tools.append(only); tools.append(pager);
  const table = el("table"), head = el("thead"), body = el("tbody");
  const hr = el("tr");
  columns.forEach((c, i) => { const th = el("th", c.title); th.title = "sort by " + c.title;
    th.addEventListener("click", () => { if (state.sort === i) state.desc = !state.desc; else { state.sort = i; state.desc = !!c.num; } state.page = 0; draw(); });
    hr.appendChild(th); });
  head.appendChild(hr); table.append(head, body);
  const wrap = el("div", undefined, "tablewrap"); wrap.appendChild(table); host.append(tools, wrap);
  function visible() {
    const f = state.filter.toLowerCase();
    let list = rows.filter(r => (!f || String(r[0]).toLowerCase().includes(f)) && (!onlyBox || !onlyBox.checked || opts.flagged(r)));
    if (state.sort >= 0) {
      const s = state.sort, d = state.desc ? -1 : 1;
      list = list.slice().sort((a, b) => { const x = key(a[s]), y = key(b[s]);
        if (x !== x) return 1; if (y !== y) return -1; return x < y ? -d : x > y ? d : 0; });
    }
    return list;
  }
  function draw() {
    const list = visible(), pages = Math.max(1, Math.ceil(list.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    body.textContent = "";
    list.slice(state.page * PAGE, state.page * PAGE + PAGE).forEach(r => {
      const tr = el("tr", undefined, "row");
      if (opts.flagged && opts.flagged(r)) tr.classList.add("bad");
      columns.forEach((c, i) => cell(tr, c.show ? c.show(r[i], r) : fmt(r[i]), c.num ? "n" : (i === 0 ? "name" : "")));
      body.appendChild(tr);
      if (opts.detail) tr.addEventListener("click", () => toggle(tr, r, columns.length));
    });
    where.textContent = list.length ? `${(state.page * PAGE + 1).toLocaleString("en-US")}\u2013${Math.min(list.length, (state.page + 1) * PAGE).toLocaleString("en-US")} of ${list.length.toLocaleString("en-US")}` : "none";
    prev.disabled = state.page === 0; next.disabled = state.page >= pages - 1;
  }
  function toggle(tr, r, span) {
    const open = tr.nextSibling && tr.nextSibling.classList && tr.nextSibling.classList.contains("detail");
    if (open) { tr.nextSibling.remove(); return; }
    const d = el("tr", undefined, "detail"), td = el("td"); td.colSpan = span; d.appendChild(td);
    opts.detail(td, r); tr.after(d);
  }
  search.addEventListener("input", () => { state.filter = search.value; state.page = 0; draw(); });
  if (onlyBox) onlyBox.addEventListener("change", () => { state.page = 0; draw(); });
  prev.addEventListener("click", () => { state.page -= 1; draw(); });
  next.addEventListener("click", () => { state.page += 1; draw(); });
  draw();
}

function figureSrc(index) {
  const pair = DATA.figures[index];
  return document.getElementById("log-counts").checked ? pair[1] : pair[0];
}
function histogramDetail(td, r) {
  const v = DATA.variables[r[r.length - 1]];
  const grid = el("pre");
  const lines = [`shape ${v.shape}   dtype ${v.dtype}   device ${v.device || "\u2014"}   trainable ${v.trainable}`,
    `min ${fmt(v.min)}   max ${fmt(v.max)}   mean ${fmt(v.mean)}   std ${fmt(v.std)}   L2 ${fmt(v.l2)}`,
    `NaN ${fmt(v.nan)}   Inf ${fmt(v.inf)}   zeros ${fmt(v.zeros)}   elements ${fmt(v.count)}`];
  if (v.note) lines.push("note: " + v.note);
  grid.textContent = lines.join("\n"); td.appendChild(grid);
  if (v.figure >= 0) {
    const img = el("img"); img.alt = "histogram of " + v.name; img.dataset.figure = v.figure; img.src = figureSrc(v.figure); img.className = "hist"; td.appendChild(img);
  } else if (v.counts.length) {
    const p = el("pre");
    p.textContent = `histogram (no figure drawn: ${DATA.figure_rule}), ${v.counts.length} bins over [${fmt(v.edges[0])}, ${fmt(v.edges[1])}]:\n` + v.counts.join(" ");
    td.appendChild(p);
  }
}
function flaggedVar(r) { const v = DATA.variables[r[r.length - 1]]; return (v.nan || 0) + (v.inf || 0) > 0; }

const varCols = [
  {title: "name"}, {title: "shape"}, {title: "dtype"}, {title: "trainable"}, {title: "device"},
  {title: "elements", num: 1}, {title: "bytes", num: 1}, {title: "min", num: 1}, {title: "max", num: 1},
  {title: "mean", num: 1}, {title: "std", num: 1}, {title: "L2 norm", num: 1}, {title: "NaN", num: 1},
  {title: "Inf", num: 1}, {title: "zeros", num: 1}];
makeTable("variables", varCols, DATA.variables.map((v, i) => [v.name, v.shape, v.dtype, String(v.trainable), v.device || "",
  v.count, v.nbytes, v.min, v.max, v.mean, v.std, v.l2, v.nan, v.inf, v.zeros, i]),
  {sort: -1, flagCol: 12, flagged: flaggedVar, detail: histogramDetail});

if (DATA.diff) {
  const D = DATA.diff;
  makeTable("changed", [{title: "name"}, {title: "relative change", num: 1}, {title: "max abs diff", num: 1},
    {title: "share changed", num: 1, show: pct}, {title: "elements changed", num: 1}, {title: "NaN/Inf appeared", num: 1}],
    D.changed, {sort: 1, desc: true, flagCol: 5, flagged: r => r[5] > 0});
  makeTable("added", [{title: "name"}, {title: "shape"}, {title: "dtype"}], D.added, {});
  makeTable("removed", [{title: "name"}, {title: "shape"}, {title: "dtype"}], D.removed, {});
  makeTable("retyped", [{title: "name"}, {title: "shape in A"}, {title: "shape in B"}, {title: "dtype in A"}, {title: "dtype in B"}], D.retyped, {});
}
document.getElementById("log-counts").addEventListener("change", () => {
  document.querySelectorAll("img[data-figure]").forEach(img => { img.src = figureSrc(Number(img.dataset.figure)); });
});
document.querySelectorAll("img[data-figure]").forEach(img => { img.src = figureSrc(Number(img.dataset.figure)); });
"""
