// The HTML report's stylesheet and script, inline in the page (no files, no network).
//
// The script reads the data block with JSON.parse and puts model strings into the DOM only
// through textContent / setAttribute / createTextNode: nothing from the report is ever parsed
// as markup. It must never contain the sequence "</script" (it would end its element).

#include "html_detail.h"

#include <iterator>
#include <string>

namespace ampscope::reports::detail {
namespace {

/// How an action looks: its name's colour (.act-<name>) and its chip (.chip.<name>).
struct ActionLook {
  const char* colour;
  const char* chip_background;
  const char* chip_colour;
};
/// One row per Action, in kActionNames' order.
constexpr ActionLook kActionLooks[] = {
    {"var(--red)", "#ffcecb", "#82071e"},                   // pin_fp32
    {"var(--orange)", "#fff1e5", "var(--orange)"},          // loss_scaling
    {"var(--violet)", "var(--violet-bg)", "var(--violet)"}, // fix_model
    {"var(--amber)", "var(--amber-bg)", "var(--amber)"},    // watch
    {"var(--orange)", "#fff1e5", "var(--orange)"},          // fp32_master_weights
};
static_assert(std::size(kActionLooks) == kActionNames.size(), "every Action needs its look in kActionLooks");

const char* base_css();

}  // namespace

const std::string& html_css() {
  static const std::string css = [] {
    std::string s = base_css();
    for (std::size_t i = 0; i < kActionNames.size(); ++i) {
      const std::string name(kActionNames[i]);
      const ActionLook& l = kActionLooks[i];
      s += ".act-" + name + "{color:" + l.colour + "}.chip." + name + "{background:" + l.chip_background +
           ";color:" + l.chip_colour + "}\n";
    }
    return s;
  }();
  return css;
}

namespace {

const char* base_css() {
  return R"css(
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--red:#cf222e;--red-bg:#ffebe9;
--green:#1a7f37;--green-bg:#dafbe1;--amber:#9a6700;--amber-bg:#fff8c5;--blue:#0969da;--orange:#bc4c00;
--violet:#8250df;--violet-bg:#fbefff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:#fff}
header.top{position:sticky;top:0;z-index:5;display:flex;gap:1.5em;align-items:center;padding:.45em 1.5em;
background:#1f2328;color:#fff;flex-wrap:wrap}
header.top a{color:#d1d9e0;text-decoration:none;margin-right:1.1em;font-size:.92em}
header.top a:hover{color:#fff}
.brand{font-weight:700;letter-spacing:.03em}
main{max-width:1320px;margin:0 auto;padding:.6em 1.5em 3em}
section{margin:1.1em 0 2.2em;scroll-margin-top:3em}
#gradients,#loss-scale,#what-if{content-visibility:auto;contain-intrinsic-size:auto 1200px}
h1{font-size:1.55em;margin:.3em 0 .3em}
h2{font-size:1.22em;margin:0 0 .5em;padding-bottom:.25em;border-bottom:1px solid var(--line)}
h4{margin:0 0 .2em;font-size:.9em;font-weight:600;overflow-wrap:anywhere}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em}
.cmd code{background:var(--soft);border:1px solid var(--line);padding:.25em .6em;border-radius:6px;
display:inline-block;max-width:100%;overflow-wrap:anywhere}
.kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(165px,1fr));gap:.5em}
.kv>div{border:1px solid var(--line);border-radius:6px;padding:.35em .7em;background:var(--soft)}
.kv .k{display:block;color:var(--muted);font-size:.75em;text-transform:uppercase;letter-spacing:.04em}
.kv .v{font-weight:600;overflow-wrap:anywhere}
.notes{color:var(--muted);font-size:.9em;margin:.6em 0 0}
.banner{display:flex;gap:1em;align-items:flex-start;padding:.9em 1.2em;border-radius:8px;border:1px solid}
.banner h2{border:0;margin:0 0 .15em;padding:0;font-size:1.3em}
.banner p{margin:.25em 0}
.banner .icon{font-size:1.3em;font-weight:700;width:1.9em;height:1.9em;border-radius:50%;display:flex;
align-items:center;justify-content:center;color:#fff;flex:none}
.banner.bad{background:var(--red-bg);border-color:#ffcecb}.banner.bad .icon{background:var(--red)}
.banner.clean{background:var(--green-bg);border-color:#aceebb}.banner.clean .icon{background:var(--green)}
.banner.warn{background:var(--amber-bg);border-color:#eac54f}.banner.warn .icon{background:#bf8700}
.banner .diag{font-size:1.02em}.banner .action{font-weight:600}
table.grid{border-collapse:collapse;width:100%;font-size:.9em}
.grid th,.grid td{border-bottom:1px solid var(--line);padding:.3em .55em;text-align:left;vertical-align:top}
.grid thead th{background:var(--soft);font-weight:600;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.sev{display:inline-block;padding:.05em .55em;border-radius:10px;font-size:.85em;font-weight:600}
.sev-critical{background:var(--red);color:#fff}.sev-high{background:#ffcecb;color:#82071e}
.sev-medium{background:var(--amber-bg);color:var(--amber)}.sev-low{background:#eaeef2;color:var(--muted)}
.act{font-weight:700}
code.code{background:var(--soft);border:1px solid var(--line);border-radius:4px;padding:0 .3em;font-size:.82em;
white-space:nowrap}
details summary{cursor:pointer;color:var(--muted);font-size:.85em;margin-top:.2em}
details pre{background:var(--soft);padding:.5em;max-height:22em;overflow:auto;font-size:.8em;margin:.3em 0}
a.goto{color:var(--blue);text-decoration:none}a.goto:hover{text-decoration:underline}
.hint{color:var(--muted);font-size:.9em;margin:.2em 0 .6em;max-width:75em}
.muted{color:var(--muted)}
.controls{display:flex;flex-wrap:wrap;gap:.6em;align-items:center;margin:.5em 0}
input[type=search]{font:inherit;padding:.3em .6em;border:1px solid var(--line);border-radius:6px;min-width:20em}
button,select{font:inherit;padding:.2em .7em;border:1px solid var(--line);border-radius:6px;background:#fff;
cursor:pointer;color:var(--fg)}
button:hover{background:var(--soft)}
.scroll{overflow-x:auto}
.layers th[data-key]{cursor:pointer;user-select:none}
.layers th.asc::after{content:" \25B2";font-size:.75em}.layers th.desc::after{content:" \25BC";font-size:.75em}
.layers tr.layer:hover>td{background:#f6f8fa}
.layers tr.bad>td{background:#fff5f4}
.layers tr.sel>td{background:#ddf4ff}
.layers td.name{white-space:nowrap}
.tw{border:0;background:none;padding:0;width:1.3em;color:var(--muted);cursor:pointer;font-size:.9em}
.tw.none{display:inline-block;cursor:default}
.lname{border:0;background:none;padding:0;color:var(--blue);font-family:ui-monospace,SFMono-Regular,Menlo,
Consolas,monospace;font-size:.92em;cursor:pointer;text-align:left}
.lname:hover{text-decoration:underline}
.ty{color:var(--muted)}
.nf{color:var(--red);font-weight:700}
td.zero{color:#aab1b9}
.chip{display:inline-block;font-size:.78em;padding:0 .45em;border-radius:8px;margin-right:.2em;background:#eaeef2;
white-space:nowrap}
tr.detail>td{background:#fbfcfd;padding:.6em .9em .9em 2em;border-bottom:2px solid var(--line)}
table.ops{border-collapse:collapse;font-size:.85em;margin-bottom:.7em;width:auto}
table.ops th,table.ops td{border-bottom:1px solid var(--line);padding:.2em .5em;text-align:left}
table.ops th{background:#eef1f4;white-space:nowrap}
.down{color:var(--orange);font-weight:600}.up{color:var(--blue);font-weight:600}
.hists{display:grid;grid-template-columns:repeat(auto-fill,minmax(400px,1fr));gap:.7em}
#agg-hists{grid-template-columns:repeat(auto-fill,minmax(560px,1fr))}
.hist{border:1px solid var(--line);border-radius:6px;padding:.45em .6em;background:#fff;break-inside:avoid}
.hist .cap{font-size:.8em;color:var(--muted);font-variant-numeric:tabular-nums}
.hist .cap b{color:var(--fg)}
.hist svg{width:100%;height:auto;display:block}
svg.chart{max-width:100%;height:auto;display:block}
svg text{font:10px system-ui,-apple-system,"Segoe UI",sans-serif;fill:#59636e}
svg text.label{font:11px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;fill:#1f2328}
svg text.lane{font-size:9px}svg text.sel{font-weight:700;fill:#1a7f37}
.prop{color:#9a6700}
.b-normal{fill:#0969da}.b-sub{fill:#d4a72c}.b-over{fill:#cf222e}.b-under{fill:#8250df}
.z-normal{fill:#eefbf1}.z-sub{fill:#fffbe0}.z-over{fill:#ffebe9}.z-under{fill:#f7ecff}
.lane-normal{fill:#8c959f}.lane-sub{fill:#d1d9e0}.lane-normal.sel{fill:#1a7f37}.lane-sub.sel{fill:#aceebb}
.tick{stroke:#d1d9e0;stroke-dasharray:2 3}.base{stroke:#8c959f}
.spans .band-normal{fill:#dafbe1;fill-opacity:.75}.spans .band-sub{fill:#fff8c5;fill-opacity:.8}
.spans .band-under{fill:#f7ecff;fill-opacity:.8}.spans .band-over{fill:#ffebe9;fill-opacity:.8}.spans .stripe{fill:#1f2328;fill-opacity:.035}
.spans .fwd line{stroke:#0969da}.spans .fwd rect{fill:#0969da}
.spans .bwd line{stroke:#bc4c00}.spans .bwd rect{fill:#bc4c00}
.lossscale .scale{fill:none;stroke:#0969da;stroke-width:2}
.lossscale .skip line{stroke:#ff8182;stroke-opacity:.35;stroke-width:5}.lossscale .skip circle{fill:#cf222e}
.legend{font-size:.85em;color:var(--muted)}
.legend .sw{display:inline-block;width:.9em;height:.9em;border-radius:2px;vertical-align:-.1em;margin:0 .3em 0 .9em}
.legend .sw:first-child{margin-left:0}
.sw.fwd{background:#0969da}.sw.bwd{background:#bc4c00}.sw.band-normal{background:#dafbe1;border:1px solid #aceebb}
.sw.band-sub{background:#fff8c5;border:1px solid #eac54f}
.sw.band-under{background:#f7ecff;border:1px solid #d8b9ff}.sw.band-over{background:#ffebe9;border:1px solid #ffcecb}.sw.scale{background:#0969da;height:3px}
.sw.skip{background:#cf222e;border-radius:50%}
.sw.b-normal{background:#0969da}.sw.b-sub{background:#d4a72c}.sw.b-over{background:#cf222e}.sw.b-under{background:#8250df}
.wv{font-weight:600;font-size:.82em;padding:0 .45em;border-radius:8px}
.wv-safe{background:var(--green-bg);color:var(--green)}.wv-overflow{background:var(--red-bg);color:var(--red)}
.wv-underflow{background:var(--violet-bg);color:var(--violet)}
.wi{font-size:.8em;font-variant-numeric:tabular-nums;white-space:nowrap}
.whatif td>b.wv{float:left;margin:.15em .6em .3em 0;min-width:6.4em;text-align:center}
.rank-detail{font-size:.95em}
#rank-table tr.sel>td{background:#ddf4ff}
tr.flash>td{animation:flash 2.5s ease-out}
@keyframes flash{from{background:#fff8c5}to{background:transparent}}
footer{color:var(--muted);font-size:.8em;text-align:center;padding:1em;border-top:1px solid var(--line)}
@media print{
header.top,.controls,.tw,.more-row,noscript,.hint .screen{display:none!important}
body{font-size:9.5pt}main{max-width:none;padding:0}
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}
.scroll{overflow:visible}a.goto,.lname{color:inherit}
details pre{max-height:none;overflow:visible;white-space:pre-wrap;font-size:7.5pt}
.banner,.hist,tr,svg{break-inside:avoid}h2{break-after:avoid}
.hists,#agg-hists{grid-template-columns:1fr 1fr}
}
)css";
}

}  // namespace

const char* html_js() {
  return R"js(
(function () {
  'use strict';
  var T0 = performance.now();
  var D = JSON.parse(document.getElementById('ampscope-data').textContent);
  var F = D.formats, NS = 'http://www.w3.org/2000/svg', COLS = 13, PAGE = 250;
  var S = {fmt: 0, key: null, dir: 1, filter: '', findings: false, open: {}, det: {}, limit: PAGE};
  F.forEach(function (f, i) { if (f.name === D.autocast_dtype) S.fmt = i; });

  // ---- decode the compact data block (positions documented in reports/src/html_detail.h) ----
  var STR = D.strs, Z4 = [0, 0, 0, 0];
  function st(a) {
    return {count: a[0], nan: a[1], posinf: a[2], neginf: a[3], zeros: a[4], absmax: a[5],
            of: a[6] || Z4, uf: a[7] || Z4, sn: a[8] || Z4, hist: [a[9], a[10]]};
  }
  D.layers.forEach(function (l) {
    l.ops = l.ops.map(function (o) {
      return {op: STR[o[0]], phase: STR[o[1]], calls: o[2], in: STR[o[3]], comp: STR[o[4]], out: STR[o[5]],
              autocast: STR[o[6]], casts: o[7], first_step: o[8], last_step: o[9], nff: o[10], s: st(o[11]),
              closs: o[12] || 0};
    });
    l.params = l.params.map(function (p) {
      return {name: p[0], dtype: STR[p[1]], updates: p[2], s: st(p[3]), v: p[4] ? st(p[4]) : null};
    });
  });
  ['activations', 'act_grads', 'param_grads'].forEach(function (k) { D.agg[k] = st(D.agg[k]); });

  // Bidirectional controls in a name (an unclosed U+202E) would reorder the text after it:
  // every string from the report is shown with them as visible \uXXXX text.
  var BIDI = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
  function vis(s) {
    return String(s).replace(BIDI, function (c) { return '\\u' + c.charCodeAt(0).toString(16).toUpperCase(); });
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = vis(text);
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = vis(text);
    return e;
  }
  function tip(node, text) { node.appendChild(sv('title', {}, text)); return node; }
  function label(n) { return n === '' ? '(root)' : vis(n); }
  var SUP = {'-': '\u207B', 0: '\u2070', 1: '\u00B9', 2: '\u00B2', 3: '\u00B3', 4: '\u2074', 5: '\u2075',
             6: '\u2076', 7: '\u2077', 8: '\u2078', 9: '\u2079'};
  function p2(e) { return '2' + String(e).split('').map(function (c) { return SUP[c]; }).join(''); }
  function num(v) {
    if (v === null || v === undefined) return '\u2013';
    var a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e7) return String(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e7)) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }
  function compact(n) {
    if (n < 1e4) return String(n);
    if (n < 1e6) return Number((n / 1e3).toPrecision(3)) + 'k';
    if (n < 1e9) return Number((n / 1e6).toPrecision(3)) + 'M';
    return Number((n / 1e9).toPrecision(3)) + 'G';
  }
  var SHORT = {float32: 'fp32', float16: 'fp16', bfloat16: 'bf16', float64: 'fp64'};
  function sd(d) { d = (d || '').replace(/^torch\./, ''); return d === '' ? '-' : (SHORT[d] || d); }
  function nonfinite(s) { return s.nan + s.posinf + s.neginf; }
  function histTotal(h) { return h[1].reduce(function (a, b) { return a + b; }, 0); }
  function mergeHist(into, h) {
    for (var j = 0; j < h[1].length; j++) if (h[1][j]) { var e = h[0] + j; into[e] = (into[e] || 0) + h[1][j]; }
  }
  function span(m) {
    var ks = Object.keys(m).map(Number);
    if (!ks.length) return null;
    return [Math.min.apply(null, ks), Math.max.apply(null, ks)];
  }

  // ---- the layer tree -------------------------------------------------------------------
  var L = D.layers.map(function (l, i) {
    var g = {}, a = {i: i, l: l, kids: [], parent: -1, depth: 0, entries: l.ops.length, calls: 0, casts: 0,
                     closs: 0, nonfinite: 0, origins: 0, absmax: null, comp: {}, advice: D.recs[l.name] || []};
    l.ops.forEach(function (o) {
      a.calls += o.calls; a.casts += o.casts; a.closs += o.closs; a.origins += o.nff; a.nonfinite += nonfinite(o.s);
      if (o.phase === 'backward') mergeHist(g, o.s.hist);
      else {
        if (o.s.absmax !== null && (a.absmax === null || o.s.absmax > a.absmax)) a.absmax = o.s.absmax;
        if (o.phase === 'forward' && o.comp) a.comp[sd(o.comp)] = 1;
      }
    });
    l.params.forEach(function (p) { a.nonfinite += nonfinite(p.s); mergeHist(g, p.s.hist); });
    a.comp = Object.keys(a.comp).sort().join(', ');
    a.grad = span(g);
    a.findings = a.origins > 0 || a.advice.length > 0;
    a.search = (l.name + ' ' + l.type + ' ' + l.ops.map(function (o) { return o.op; }).join(' ')).toLowerCase();
    return a;
  });
  var byName = {};
  L.forEach(function (a) { byName[a.l.name] = a.i; });
  L.forEach(function (a) {
    var n = a.l.name;
    if (n === '' || n === '<outside>') return;
    var parts = n.split('.');
    for (var k = parts.length - 1; k > 0; k--) {
      var p = parts.slice(0, k).join('.');
      if (byName[p] !== undefined && byName[p] !== a.i) { a.parent = byName[p]; break; }
    }
    if (a.parent < 0 && byName[''] !== undefined) a.parent = byName[''];
  });
  var tops = [];
  L.forEach(function (a) { if (a.parent >= 0) L[a.parent].kids.push(a.i); else tops.push(a.i); });
  (function depths(list, d) { list.forEach(function (i) { L[i].depth = d; depths(L[i].kids, d + 1); }); })(tops, 0);
  function openPath(i) { for (var p = L[i].parent; p >= 0; p = L[p].parent) S.open[p] = true; }
  function initialOpen() {
    S.open = {};
    tops.forEach(function (i) { S.open[i] = true; });
    L.forEach(function (a) { if (a.findings) openPath(a.i); });
  }
  initialOpen();

  function overflow(a) {
    var n = 0;
    a.l.ops.forEach(function (o) { n += o.s.of[S.fmt]; });
    a.l.params.forEach(function (p) { n += p.s.of[S.fmt]; });
    return n;
  }
  function gunder(a) {
    var n = 0;
    a.l.ops.forEach(function (o) { if (o.phase === 'backward') n += o.s.uf[S.fmt]; });
    a.l.params.forEach(function (p) { n += p.s.uf[S.fmt]; });
    return n;
  }
  function wunder(a) {
    var n = 0;
    a.l.params.forEach(function (p) { if (p.v) n += p.v.uf[S.fmt]; });
    return n;
  }
  var SORT = {
    name: function (a) { return a.l.name; }, type: function (a) { return a.l.type; },
    entries: function (a) { return a.entries; }, calls: function (a) { return a.calls; },
    comp: function (a) { return a.comp; }, casts: function (a) { return a.casts; },
    closs: function (a) { return a.closs; }, wunder: wunder,
    nonfinite: function (a) { return a.nonfinite; }, origins: function (a) { return a.origins; },
    absmax: function (a) { return a.absmax === null ? -1 : a.absmax; }, overflow: overflow,
    grad: function (a) { return a.grad ? a.grad[0] : Infinity; }, gunder: gunder,
    advice: function (a) { return a.advice.length; }
  };

  // ---- rows ------------------------------------------------------------------------------
  function cell(tr, text, cls) {
    var td = el('td', (cls || '') + (text === 0 || text === '0' ? ' zero' : ''), text);  // zeros recede
    tr.appendChild(td);
    return td;
  }
  function nameCell(tr, a, flat) {
    var td = el('td', 'name');
    if (!flat) td.style.paddingLeft = (0.4 + a.depth * 1.1) + 'em';
    if (!flat && a.kids.length) {
      var tw = el('button', 'tw', S.open[a.i] ? '\u25BE' : '\u25B8');
      tw.type = 'button';
      tw.setAttribute('aria-label', (S.open[a.i] ? 'collapse ' : 'expand ') + label(a.l.name));
      tw.setAttribute('data-act', 'tree');
      td.appendChild(tw);
    } else td.appendChild(el('span', 'tw none', ''));
    var n = a.l.name, shown = label(n);
    if (!flat && a.parent >= 0 && L[a.parent].l.name !== '' && n.indexOf(L[a.parent].l.name + '.') === 0)
      shown = n.slice(L[a.parent].l.name.length + 1);
    var b = el('button', 'lname', shown);
    b.type = 'button';
    b.title = label(n) + ' \u2014 click for ops and histograms';
    b.setAttribute('data-act', 'details');
    td.appendChild(b);
    tr.appendChild(td);
  }
  function layerRow(a, flat) {
    var tr = el('tr', 'layer' + (a.origins > 0 ? ' bad' : ''));
    tr.setAttribute('data-i', a.i);
    nameCell(tr, a, flat);
    cell(tr, a.l.type, 'ty');
    cell(tr, a.entries, 'n'); cell(tr, compact(a.calls), 'n'); cell(tr, a.comp);
    cell(tr, a.casts, 'n');
    cell(tr, compact(a.closs), 'n' + (a.closs ? ' nf' : ''));
    cell(tr, compact(a.nonfinite), 'n' + (a.nonfinite ? (a.origins ? ' nf' : ' prop') : ''));
    cell(tr, a.origins, 'n' + (a.origins ? ' nf' : ''));
    cell(tr, num(a.absmax), 'n');
    var of = overflow(a);
    cell(tr, of, 'n' + (of ? ' nf' : ''));
    cell(tr, a.grad ? p2(a.grad[0]) + ' \u2026 ' + p2(a.grad[1] + 1) : '\u2013', 'n');
    var gu = gunder(a);
    cell(tr, compact(gu), 'n' + (gu ? ' nf' : ''));
    var wu = wunder(a);
    cell(tr, compact(wu), 'n' + (wu ? ' nf' : ''));
    var adv = el('td');
    a.advice.forEach(function (x) { adv.appendChild(el('span', 'chip ' + x, x)); });
    tr.appendChild(adv);
    return tr;
  }

  // ---- exponent histogram (SVG) -----------------------------------------------------------
  function zone(e, f) {
    if (e > f.max_exp) return 'over';
    if (e < f.min_sub) return 'under';
    if (e < f.min_normal) return 'sub';
    return 'normal';
  }
  function histView(h, f) {
    var lo = h[0] - 2, hi = h[0] + h[1].length + 1;
    if (f.min_sub - 2 >= lo - 16) lo = Math.min(lo, f.min_sub - 2);
    if (f.max_exp + 2 <= hi + 16) hi = Math.max(hi, f.max_exp + 2);
    return [lo, hi];
  }
  // A chart frame: geometry and an exponent -> x mapping clamped to the view [lo, hi].
  function frame(wide, lo, hi) {
    var g = {W: wide ? 640 : 440, ml: 58, mr: 16, top: 8, ph: wide ? 120 : 84, lo: lo, hi: hi};
    g.H = g.top + g.ph + 18 + F.length * 11 + 6;
    g.bw = (g.W - g.ml - g.mr) / (hi - lo);
    g.x = function (e) { return g.ml + (Math.max(lo, Math.min(hi, e)) - lo) * g.bw; };
    return g;
  }
  function drawZones(svg, g, f) {
    [['under', -1e9, f.min_sub], ['sub', f.min_sub, f.min_normal], ['normal', f.min_normal, f.max_exp + 1],
     ['over', f.max_exp + 1, 1e9]].forEach(function (z) {
      var x0 = g.x(z[1]), x1 = g.x(z[2]);
      if (x1 > x0) svg.appendChild(sv('rect', {x: x0, y: g.top, width: x1 - x0, height: g.ph, 'class': 'z-' + z[0]}));
    });
  }
  function drawBars(svg, g, f, h) {
    var maxn = Math.max.apply(null, h[1]), ymax = Math.log10(maxn) + 1, total = histTotal(h);
    for (var p = 0; Math.pow(10, p) <= maxn; p++) {
      var yy = g.top + g.ph - (p + 1) / ymax * g.ph;
      svg.appendChild(sv('line', {x1: g.ml, x2: g.W - g.mr, y1: yy, y2: yy, 'class': 'tick'}));
      if (p % (ymax > 6 ? 2 : 1) === 0)
        svg.appendChild(sv('text', {x: g.ml - 4, y: yy + 3, 'text-anchor': 'end'}, p === 0 ? '1' : '1e' + p));
    }
    h[1].forEach(function (n, j) {
      if (!n) return;
      var e = h[0] + j, bh = (Math.log10(n) + 1) / ymax * g.ph;
      var r = sv('rect', {x: g.x(e) + 0.5, y: g.top + g.ph - bh, width: Math.max(1, g.bw - 1), height: bh,
                          'class': 'b-' + zone(e, f)});
      tip(r, p2(e) + ' \u2264 |x| < ' + p2(e + 1) + ': ' + n + ' values (' + (100 * n / total).toPrecision(3) + '%)');
      svg.appendChild(r);
    });
  }
  function drawAxis(svg, g, wide) {
    var y = g.top + g.ph, step = Math.max(1, Math.ceil((g.hi - g.lo) / (wide ? 16 : 10)));
    svg.appendChild(sv('line', {x1: g.ml, x2: g.W - g.mr, y1: y, y2: y, 'class': 'base'}));
    for (var e = Math.ceil(g.lo / step) * step; e <= g.hi; e += step)
      svg.appendChild(sv('text', {x: g.x(e), y: y + 12, 'text-anchor': 'middle'}, p2(e)));
  }
  // One lane per format under the axis: its subnormal (light) and normal (dark) exponent range.
  function drawLanes(svg, g) {
    F.forEach(function (f, k) {
      var y = g.top + g.ph + 18 + k * 11, sel = k === S.fmt ? ' sel' : '';
      svg.appendChild(sv('text', {x: g.ml - 4, y: y + 6, 'text-anchor': 'end', 'class': 'lane' + sel}, f.short));
      var rs = sv('rect', {x: g.x(f.min_sub), y: y, width: g.x(f.min_normal) - g.x(f.min_sub), height: 6,
                           'class': 'lane-sub' + sel});
      tip(rs, f.name + ' subnormal: ' + p2(f.min_sub) + ' \u2026 ' + p2(f.min_normal));
      var rn = sv('rect', {x: g.x(f.min_normal), y: y, width: g.x(f.max_exp + 1) - g.x(f.min_normal), height: 6,
                           'class': 'lane-normal' + sel});
      tip(rn, f.name + ' normal: ' + p2(f.min_normal) + ' \u2026 ' + f.max);
      svg.appendChild(rs); svg.appendChild(rn);
    });
  }
  function drawHist(title, s, wide) {
    var box = el('div', 'hist'), f = F[S.fmt], h = s.hist;
    box.appendChild(el('h4', null, title));
    var v = histTotal(h) ? histView(h, f) : [0, 1], g = frame(wide, v[0], v[1]);
    var svg = sv('svg', {viewBox: '0 0 ' + g.W + ' ' + g.H, width: g.W, height: g.H, 'class': 'histogram', role: 'img'});
    if (histTotal(h)) {
      drawZones(svg, g, f); drawBars(svg, g, f, h); drawAxis(svg, g, wide); drawLanes(svg, g);
    } else {
      svg.appendChild(sv('text', {x: g.W / 2, y: g.top + g.ph / 2, 'text-anchor': 'middle'}, 'no nonzero finite values'));
    }
    box.appendChild(svg);
    box.appendChild(caption(s, f));
    return box;
  }
  function caption(s, f) {
    var c = el('div', 'cap'), k = S.fmt, nz = s.count - nonfinite(s) - s.zeros;
    function part(txt, bold) { c.appendChild(bold ? el('b', null, txt) : document.createTextNode(vis(txt))); }
    part(compact(s.count) + ' values, ' + compact(nz) + ' nonzero finite, absmax ' + num(s.absmax));
    if (nonfinite(s)) part(' \u00B7 NaN ' + s.nan + ', +Inf ' + s.posinf + ', \u2212Inf ' + s.neginf, true);
    part(' \u00B7 in ' + f.name + ': ');
    part('overflow ' + s.of[k], s.of[k] > 0);
    part(', underflow ' + s.uf[k] + (nz ? ' (' + (100 * s.uf[k] / nz).toPrecision(2) + '%)' : ''), s.uf[k] > 0);
    part(', subnormal ' + s.sn[k]);
    return c;
  }

  // ---- detail row: ops table + histograms -------------------------------------------------
  var detCache = {};
  function castDir(o) {
    var i = sd(o.in), c = sd(o.comp);
    if (!o.in || !o.comp || i === c || o.autocast === 'none') return null;  // only casts autocast made
    var w = {fp64: 4, fp32: 3, bf16: 2, fp16: 2};
    return (w[c] || 0) < (w[i] || 0) ? 'down' : 'up';
  }
  function opsTable(l) {
    var t = el('table', 'ops'), hr = el('tr'), f = F[S.fmt];
    ['Op', 'Phase', 'Calls', 'Written \u2192 computed \u2192 returned', 'Autocast', 'Casts', 'Values', 'NaN',
     '\u00B1Inf', 'From finite', 'Absmax', 'Steps', 'Overflow ' + f.short, 'Underflow ' + f.short,
     'Subnormal ' + f.short].forEach(function (h) { hr.appendChild(el('th', null, h)); });
    var th = el('thead'); th.appendChild(hr); t.appendChild(th);
    var tb = el('tbody');
    l.ops.forEach(function (o) {
      var tr = el('tr'), k = S.fmt, dir = castDir(o);
      tr.appendChild(el('td', null)).appendChild(el('code', null, o.op));
      cell(tr, o.phase); cell(tr, o.calls, 'n');
      var ch = cell(tr, sd(o.in) + ' \u2192 ' + sd(o.comp) + ' \u2192 ' + sd(o.out));
      if (dir) ch.appendChild(el('span', dir, dir === 'down' ? '  cast down' : '  cast up'));
      cell(tr, o.autocast); cell(tr, o.casts, 'n'); cell(tr, compact(o.s.count), 'n');
      cell(tr, o.s.nan, 'n' + (o.s.nan ? ' nf' : '')); cell(tr, o.s.posinf + o.s.neginf, 'n' + (o.s.posinf + o.s.neginf ? ' nf' : ''));
      cell(tr, o.nff, 'n' + (o.nff ? ' nf' : '')); cell(tr, num(o.s.absmax), 'n');
      cell(tr, o.first_step + '\u2013' + o.last_step, 'n');
      cell(tr, o.s.of[k], 'n' + (o.s.of[k] ? ' nf' : '')); cell(tr, o.s.uf[k], 'n'); cell(tr, o.s.sn[k], 'n');
      tb.appendChild(tr);
    });
    t.appendChild(tb);
    return t;
  }
  function detailRow(a) {
    if (detCache[a.i]) return detCache[a.i];
    var tr = el('tr', 'detail'), td = el('td');
    td.colSpan = COLS;
    var l = a.l;
    var head = el('div', 'muted', label(l.name) + (l.type ? ' (' + l.type + ')' : '') + ': ' + l.ops.length +
                  ' op entr' + (l.ops.length === 1 ? 'y' : 'ies') + ', ' + l.params.length + ' parameter(s)');
    td.appendChild(head);
    if (l.ops.length) td.appendChild(opsTable(l));
    var grid = el('div', 'hists');
    l.ops.forEach(function (o) {
      grid.appendChild(drawHist(o.op + ' \u00B7 ' + o.phase + ' \u00B7 ' + sd(o.comp) +
                                (o.phase === 'backward' ? ' (incoming gradients)' : ' (outputs)'), o.s, false));
    });
    l.params.forEach(function (p) { grid.appendChild(drawHist('grad of ' + p.name + ' (' + sd(p.dtype) + ')', p.s, false)); });
    if (grid.childNodes.length) td.appendChild(grid);
    else td.appendChild(el('p', 'muted', 'No ops recorded in this module itself; its children have their own rows.'));
    tr.appendChild(td);
    detCache[a.i] = tr;
    return tr;
  }

  // ---- table rendering ---------------------------------------------------------------------
  var table = document.getElementById('layer-table'), tbody = table.tBodies[0];
  var filterBox = document.getElementById('layer-filter'), findingsBox = document.getElementById('layer-findings');
  var countEl = document.getElementById('layer-count');
  function flat() { return S.key !== null || S.filter !== '' || S.findings; }
  function rows() {
    if (!flat()) {
      var out = [];
      (function walk(list) { list.forEach(function (i) { out.push(L[i]); if (S.open[i]) walk(L[i].kids); }); })(tops);
      return out;
    }
    var q = S.filter.toLowerCase();
    var list = L.filter(function (a) { return (!q || a.search.indexOf(q) >= 0) && (!S.findings || a.findings); });
    if (S.key !== null) {
      var f = SORT[S.key], d = S.dir;
      list = list.map(function (a) { return [f(a), a]; });
      list.sort(function (x, y) { return x[0] < y[0] ? -d : x[0] > y[0] ? d : x[1].i - y[1].i; });
      list = list.map(function (p) { return p[1]; });
    }
    return list;
  }
  function render() {
    var list = rows(), isFlat = flat(), shown = isFlat ? list.slice(0, S.limit) : list;
    var frag = document.createDocumentFragment();
    shown.forEach(function (a) {
      frag.appendChild(layerRow(a, isFlat));
      if (S.det[a.i]) frag.appendChild(detailRow(a));
    });
    if (shown.length < list.length) {
      var tr = el('tr', 'more-row'), td = el('td');
      td.colSpan = COLS;
      var b = el('button', 'more', 'Show ' + Math.min(PAGE, list.length - shown.length) + ' more of ' + (list.length - shown.length));
      b.type = 'button'; b.setAttribute('data-act', 'more');
      td.appendChild(b); tr.appendChild(td); frag.appendChild(tr);
    }
    tbody.textContent = '';
    tbody.appendChild(frag);
    countEl.textContent = (isFlat ? list.length + ' of ' : shown.length + ' shown of ') + L.length + ' layers';
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      var k = th.getAttribute('data-key');
      th.classList.toggle('asc', k === S.key && S.dir === 1);
      th.classList.toggle('desc', k === S.key && S.dir === -1);
      if (k === 'overflow') th.textContent = 'Overflow ' + F[S.fmt].short;
      if (k === 'gunder') th.textContent = 'Grad underflow ' + F[S.fmt].short;
      if (k === 'wunder') th.textContent = 'Weight underflow ' + F[S.fmt].short;
    });
  }
  tbody.addEventListener('click', function (ev) {
    var b = ev.target.closest('button');
    if (!b) return;
    var act = b.getAttribute('data-act');
    if (act === 'more') { S.limit += PAGE; return render(); }
    var tr = b.closest('tr.layer');
    if (!tr) return;
    var i = Number(tr.getAttribute('data-i'));
    if (act === 'tree') S.open[i] = !S.open[i];
    if (act === 'details') S.det[i] = !S.det[i];
    render();
  });
  function sortBy(k) {
    if (S.key === k) { if (S.dir === (k === 'name' || k === 'type' || k === 'comp' ? 1 : -1)) S.dir = -S.dir; else S.key = null; }
    else { S.key = k; S.dir = (k === 'name' || k === 'type' || k === 'comp') ? 1 : -1; }
    S.limit = PAGE;
    render();
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    var k = th.getAttribute('data-key');
    th.addEventListener('click', function () { sortBy(k); });
    th.addEventListener('keydown', function (ev) { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); sortBy(k); } });
  });
  var timer = null;
  filterBox.addEventListener('input', function () {
    clearTimeout(timer);
    timer = setTimeout(function () { S.filter = filterBox.value.trim(); S.limit = PAGE; render(); }, 120);
  });
  findingsBox.addEventListener('change', function () { S.findings = findingsBox.checked; S.limit = PAGE; render(); });
  document.getElementById('expand-all').addEventListener('click', function () {
    L.forEach(function (a) { if (a.kids.length) S.open[a.i] = true; });
    render();
  });
  document.getElementById('collapse-all').addEventListener('click', function () {
    S.open = {}; S.det = {};
    tops.forEach(function (i) { S.open[i] = true; });
    render();
  });

  // ---- reveal a layer (links from the verdict, recommendations, what-if, ranks) -------------
  function reveal(name) {
    var i = byName[name];
    if (i === undefined) return;
    S.key = null; S.filter = ''; S.findings = false; filterBox.value = ''; findingsBox.checked = false;
    openPath(i); S.det[i] = true;
    render();
    var tr = tbody.querySelector('tr.layer[data-i="' + i + '"]');
    if (!tr) return;
    tr.scrollIntoView({block: 'center'});
    tr.classList.remove('flash'); void tr.offsetWidth; tr.classList.add('flash');
  }
  document.addEventListener('click', function (ev) {
    var a = ev.target.closest('a.goto');
    if (!a) return;
    ev.preventDefault();
    reveal(a.getAttribute('data-layer'));
  });

  // ---- model-wide histograms ------------------------------------------------------------------
  function drawAgg() {
    var box = document.getElementById('agg-hists');
    box.textContent = '';
    box.appendChild(drawHist('Activation gradients, all backward nodes (the mixed-precision figure)', D.agg.act_grads, true));
    box.appendChild(drawHist('Parameter gradients, all parameters', D.agg.param_grads, true));
    box.appendChild(drawHist('Forward outputs, all ops', D.agg.activations, true));
  }
  var selects = document.querySelectorAll('select.fmt-select');
  Array.prototype.forEach.call(selects, function (sel) {
    sel.value = String(S.fmt);
    sel.addEventListener('change', function () {
      S.fmt = Number(sel.value);
      Array.prototype.forEach.call(selects, function (o) { o.value = String(S.fmt); });
      detCache = {};
      render(); drawAgg();
    });
  });

  // ---- rank selector -------------------------------------------------------------------------
  var rankSel = document.getElementById('rank-select');
  function showRank() {
    var out = document.getElementById('rank-detail'), v = rankSel.value, e = null;
    out.textContent = '';
    if (v === '') e = D.first_nonfinite;
    else D.by_rank.forEach(function (x) { if (String(x.rank) === v) e = x; });
    var rt = document.getElementById('rank-table');
    if (rt) Array.prototype.forEach.call(rt.tBodies[0].rows, function (r) { r.classList.toggle('sel', r.getAttribute('data-rank') === v); });
    var who = v === '' ? 'Earliest over all ranks' : 'Rank ' + v;
    if (!e) { out.appendChild(document.createTextNode(who + ': no non-finite value.')); return; }
    out.appendChild(document.createTextNode(who + ': first ' + e.kind + ' at step ' + e.step + ' (' + e.phase + ', rank ' +
                                            e.rank + ') in layer '));
    var a = el('a', 'goto'); a.href = '#layers'; a.setAttribute('data-layer', e.layer);
    a.appendChild(el('code', null, label(e.layer)));
    out.appendChild(a);
    out.appendChild(document.createTextNode(', op '));
    out.appendChild(el('code', null, e.op));
    out.appendChild(document.createTextNode(e.fp32 === true ? ' \u2014 also non-finite in float32 (model bug)' :
                                            e.fp32 === false ? ' \u2014 finite in float32 (precision problem)' : ''));
  }
  if (rankSel) { rankSel.addEventListener('change', showRank); showRank(); }

  window.addEventListener('beforeprint', function () {
    // The what-if rows folded away print too; the evidence JSON stays folded (its key line prints).
    Array.prototype.forEach.call(document.querySelectorAll('details.more'), function (d) { d.open = true; });
  });
  render();
  drawAgg();
  document.body.setAttribute('data-ready-ms', String(Math.round(performance.now() - T0)));
})();
)js";
}

}  // namespace ampscope::reports::detail
