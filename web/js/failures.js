// The failure view (docs/scheduling.md#failures-told-apart): the trials that
// failed, grouped by error signature (the server's error_signature: the
// reason and the error's last line, digits as N), each group with its
// attributions; and for the chosen group, per hyperparameter, a histogram of
// where its trials come from against all the experiment's trials.
import { h } from './dom.js';
import { fmtValue } from './format.js';

const BINS = 8;
const MAX_CATEGORIES = 12;

// Failed trials by signature, the largest group first.
export function failureGroups(trials) {
  const groups = new Map();
  for (const t of trials) {
    if (!t.error_signature) continue;
    let g = groups.get(t.error_signature);
    if (!g) groups.set(t.error_signature, (g = { sig: t.error_signature, trials: [], attrs: {} }));
    g.trials.push(t);
    const a = t.attribution || 'unknown';
    g.attrs[a] = (g.attrs[a] || 0) + 1;
  }
  return [...groups.values()].sort((a, b) => b.trials.length - a.trials.length || a.sig.localeCompare(b.sig));
}

// Bins of one parameter over every trial: numbers in BINS equal ranges (on a
// log scale when they are all positive and span more than 20x), anything
// else (and a few distinct numbers) by value. Each bin: {label, lo, hi,
// all, failed}.
export function paramBins(key, all, failed) {
  const val = (t) => (t.config ? t.config[key] : undefined);
  const nums = all.map(val).filter((v) => typeof v === 'number' && Number.isFinite(v));
  const bins = [];
  // A few distinct numbers (a choice of batch sizes) are values, not ranges.
  const many = new Set(nums).size > 4;
  if (many && nums.length === all.map(val).filter((v) => v !== undefined && v !== null).length) {
    let lo = Math.min(...nums), hi = Math.max(...nums);
    const log = lo > 0 && hi / lo > 20;
    const f = log ? Math.log : (x) => x, g = log ? Math.exp : (x) => x;
    const a = f(lo), b = f(hi), n = hi > lo ? BINS : 1, w = (b - a) / n;
    for (let i = 0; i < n; i++) {
      const blo = g(a + i * w), bhi = i === n - 1 ? hi : g(a + (i + 1) * w);
      bins.push({ label: `${fmtValue(blo)} – ${fmtValue(bhi)}`, lo: blo, hi: bhi, all: 0, failed: 0 });
    }
    const at = (v) => (n === 1 ? 0 : Math.min(n - 1, Math.max(0, Math.floor((f(v) - a) / w))));
    for (const t of all) if (typeof val(t) === 'number') bins[at(val(t))].all++;
    for (const t of failed) if (typeof val(t) === 'number') bins[at(val(t))].failed++;
    return bins;
  }
  const byValue = new Map();
  const keyOf = (v) => (typeof v === 'object' ? JSON.stringify(v) : String(v));
  for (const t of all) {
    const v = val(t);
    if (v === undefined) continue;
    const k = keyOf(v);
    if (!byValue.has(k)) {
      if (byValue.size >= MAX_CATEGORIES) continue;
      byValue.set(k, { label: k, all: 0, failed: 0 });
    }
    byValue.get(k).all++;
  }
  for (const t of failed) {
    const b = byValue.get(keyOf(val(t)));
    if (b) b.failed++;
  }
  return [...byValue.values()].sort((a, b) => a.label.localeCompare(b.label, undefined, { numeric: true }));
}

function histogram(key, bins) {
  const most = Math.max(1, ...bins.map((b) => b.all));
  return h('figure', { class: 'hist', dataset: { param: key } },
    h('figcaption', null, key),
    h('div', { class: 'bins', role: 'img', 'aria-label': `${key}: failed against all trials per range` },
      bins.map((b) => h('div', {
        class: 'bin', title: `${b.label}: ${b.failed} failed of ${b.all}`,
        dataset: { label: b.label, failed: b.failed, all: b.all },
      },
      h('div', { class: 'bar all', style: { height: `${(100 * b.all) / most}%` } },
        h('div', { class: 'bar failed', style: { height: `${b.all ? (100 * b.failed) / b.all : 0}%` } }))))),
    h('div', { class: 'bin-range muted small' }, bins.length ? `${bins[0].label.split(' – ')[0]} … ${bins[bins.length - 1].label.split(' – ').pop()}` : ''));
}

// Draws the view into box; returns false when no trial failed (the caller
// hides the section). chosen: the signature shown (kept across redraws).
export function renderFailures(box, trials, params, state) {
  const groups = failureGroups(trials);
  if (!groups.length) {
    box.replaceChildren();
    return false;
  }
  if (!groups.some((g) => g.sig === state.chosen)) state.chosen = groups[0].sig;
  const redraw = () => renderFailures(box, trials, params, state);
  const rows = groups.map((g) => h('tr', { dataset: { sig: g.sig }, class: g.sig === state.chosen ? 'chosen' : null },
    h('th', { scope: 'row' }, h('button', { type: 'button', class: 'link', 'aria-pressed': String(g.sig === state.chosen),
      onclick: () => { state.chosen = g.sig; redraw(); } }, g.sig)),
    h('td', { class: 'num' }, String(g.trials.length)),
    h('td', null, Object.entries(g.attrs).sort().map(([a, n]) =>
      h('span', { class: `tag attr attr-${a}`, dataset: { attr: a } }, `${a} ${n}`)))));
  const chosen = groups.find((g) => g.sig === state.chosen);
  box.replaceChildren(
    // Long signatures scroll inside the box, never the page (a phone's width).
    h('div', { class: 'scroll' }, h('table', { class: 'data', id: 'failure-groups' },
      h('caption', { class: 'sr-only' }, 'Failed trials by error signature'),
      h('thead', null, h('tr', null, ['Error signature', 'Trials', 'Attribution'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, rows))),
    h('p', { class: 'muted small' }, `Where the ${chosen.trials.length} trial(s) with “${chosen.sig}” come from: `
      + 'each bar is every trial in that range, its red part those that failed so.'),
    h('div', { id: 'failure-hists', class: 'hists' }, params.map((k) => histogram(k, paramBins(k, trials, chosen.trials)))));
  return true;
}
