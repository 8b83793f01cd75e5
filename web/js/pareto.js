// The Pareto view of an experiment with several objectives: a scatter of any
// two objectives (each trial's last values), the front that GET .../pareto
// answers drawn over it as a step line, and the hypervolume over time. Plain
// SVG: every point carries data-trial, data-x and data-y, so what is drawn
// can be read back (the browser test does).
import { h } from './dom.js';
import { fmtNum } from './format.js';

const NS = 'http://www.w3.org/2000/svg';
const W = 640;
const H = 360;
const PAD = { l: 64, r: 16, t: 14, b: 44 };
const HV_H = 200;

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
  return el;
}

// A linear scale over [lo, hi] (widened a little where pad; a single value
// gets room).
function scale(values, from, to, pad = true) {
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
  const room = hi > lo ? (hi - lo) * 0.05 : Math.max(Math.abs(lo), 1) * 0.1;
  if (pad || hi === lo) {
    lo -= pad ? room : 0;
    hi += room;
  }
  const f = (v) => from + ((v - lo) / (hi - lo)) * (to - from);
  f.lo = lo;
  f.hi = hi;
  return f;
}

// The points no other point beats on both axes (each in its own mode),
// ordered along x from its best end: the 2-D front of the drawn objectives.
export function front2d(pts, modeX, modeY) {
  const sx = modeX === 'max' ? -1 : 1;
  const sy = modeY === 'max' ? -1 : 1;
  const sorted = pts.slice().sort((a, b) => sx * (a.x - b.x) || sy * (a.y - b.y));
  const out = [];
  let best = Infinity;
  for (const p of sorted) {
    if (sy * p.y < best) {
      out.push(p);
      best = sy * p.y;
    }
  }
  return out;
}

function axes(g, fx, fy, xLabel, yLabel, h0) {
  const x0 = PAD.l;
  const x1 = W - PAD.r;
  const y0 = h0 - PAD.b;
  const y1 = PAD.t;
  g.append(
    svg('line', { x1: x0, y1: y0, x2: x1, y2: y0, class: 'axis' }),
    svg('line', { x1: x0, y1: y0, x2: x0, y2: y1, class: 'axis' }),
    svg('text', { x: x0, y: y0 + 16, class: 'tick', 'text-anchor': 'start' }, fmtNum(fx.lo)),
    svg('text', { x: x1, y: y0 + 16, class: 'tick', 'text-anchor': 'end' }, fmtNum(fx.hi)),
    svg('text', { x: x0 - 6, y: y0, class: 'tick', 'text-anchor': 'end' }, fmtNum(fy.lo)),
    svg('text', { x: x0 - 6, y: y1 + 10, class: 'tick', 'text-anchor': 'end' }, fmtNum(fy.hi)),
    svg('text', { x: (x0 + x1) / 2, y: h0 - 8, class: 'label', 'text-anchor': 'middle' }, xLabel),
    svg('text', { x: 14, y: (y0 + y1) / 2, class: 'label', 'text-anchor': 'middle',
      transform: `rotate(-90 14 ${(y0 + y1) / 2})` }, yLabel));
}

export class ParetoView {
  constructor(metrics, modes) {
    this.metrics = metrics;
    this.modes = modes;
    this.x = 0;
    this.y = 1;
    this.doc = null;
    this.trials = [];
    const pick = (idName, which) => h('select', {
      id: idName,
      onchange: (e) => { this[which] = Number(e.target.value); this.draw(); },
    }, metrics.map((m, i) => h('option', { value: String(i), selected: i === this[which] }, `${m} (${modes[i]})`)));
    this.scatter = svg('svg', { id: 'pareto-scatter', viewBox: `0 0 ${W} ${H}`, role: 'img',
      'aria-label': 'Trials by two objectives, with the Pareto front' });
    this.hv = svg('svg', { id: 'pareto-hv', viewBox: `0 0 ${W} ${HV_H}`, role: 'img',
      'aria-label': 'Hypervolume of the Pareto front after each trial' });
    this.summary = h('p', { id: 'pareto-summary', class: 'small' });
    this.el = h('div', { class: 'pareto' },
      h('div', { class: 'table-tools' },
        h('label', { for: 'pareto-x' }, 'x'), pick('pareto-x', 'x'),
        h('label', { for: 'pareto-y' }, 'y'), pick('pareto-y', 'y')),
      h('div', { class: 'svg-box' }, this.scatter),
      h('p', { class: 'muted small' }, 'Each dot is a trial by its last result; the ringed ones are on the Pareto front by every objective (GET …/pareto), the line is the front of the two drawn. A trial with either value missing or not finite is not drawn.'),
      this.summary,
      h('h3', null, 'Hypervolume over time'),
      h('div', { class: 'svg-box' }, this.hv));
  }

  setTrials(trials) {
    this.trials = trials;
    this.draw();
  }

  setFront(doc) {
    this.doc = doc;
    this.draw();
  }

  draw() {
    this.drawScatter();
    this.drawHv();
  }

  drawScatter() {
    const mx = this.metrics[this.x];
    const my = this.metrics[this.y];
    const val = (r, m) => (r && typeof r[m] === 'number' && Number.isFinite(r[m]) ? r[m] : null);
    const pts = [];
    for (const t of this.trials) {
      const x = val(t.last_result, mx);
      const y = val(t.last_result, my);
      if (x !== null && y !== null) pts.push({ id: t.id, x, y });
    }
    const front = [];
    for (const t of (this.doc && this.doc.trials) || []) {
      const x = val(t.values, mx);
      const y = val(t.values, my);
      if (x !== null && y !== null) front.push({ id: t.trial_id, x, y });
    }
    const all = pts.concat(front);
    const fx = scale(all.map((p) => p.x), PAD.l, W - PAD.r);
    const fy = scale(all.map((p) => p.y), H - PAD.b, PAD.t);
    const g = svg('g');
    axes(g, fx, fy, `${mx} (${this.modes[this.x]})`, `${my} (${this.modes[this.y]})`, H);
    // The 2-D front as steps: from each point along x to the next, then
    // along y (the region it dominates is on the worse side).
    const steps = front2d(front, this.modes[this.x], this.modes[this.y]);
    if (steps.length) {
      let d = `M${fx(steps[0].x)},${fy(steps[0].y)}`;
      for (let i = 1; i < steps.length; i++) d += ` H${fx(steps[i].x)} V${fy(steps[i].y)}`;
      g.append(svg('path', { d, class: 'front-line', 'data-points': steps.map((p) => `${p.x},${p.y}`).join(' ') }));
    }
    for (const p of pts) {
      g.append(svg('circle', { cx: fx(p.x), cy: fy(p.y), r: 3.5, class: 'pt', 'data-trial': p.id,
        'data-x': String(p.x), 'data-y': String(p.y) },
      svg('title', null, `trial ${p.id}: ${mx} ${fmtNum(p.x)}, ${my} ${fmtNum(p.y)}`)));
    }
    for (const p of front) {
      const a = svg('a', { href: `#/trials/${p.id}` },
        svg('circle', { cx: fx(p.x), cy: fy(p.y), r: 6, class: 'front-pt', 'data-trial': p.id,
          'data-x': String(p.x), 'data-y': String(p.y) },
        svg('title', null, `trial ${p.id} (Pareto front): ${mx} ${fmtNum(p.x)}, ${my} ${fmtNum(p.y)}`)));
      g.append(a);
    }
    this.scatter.replaceChildren(g);
    this.scatter.dataset.front = String(front.length);
    this.scatter.dataset.points = String(pts.length);
  }

  drawHv() {
    const doc = this.doc;
    const hist = (doc && doc.hypervolume_history) || [];
    const hv = doc && typeof doc.hypervolume === 'number' ? doc.hypervolume : null;
    this.hv.dataset.hv = hv === null ? '' : String(hv);
    this.hv.dataset.steps = String(hist.length);
    const ref = doc && Array.isArray(doc.reference_point) ? doc.reference_point : null;
    this.summary.replaceChildren(!doc ? 'Reading the front…'
      : `${doc.trials.length} trial${doc.trials.length === 1 ? '' : 's'} on the front; hypervolume `,
    doc ? h('strong', { id: 'pareto-hv-value' }, hv === null ? '—' : fmtNum(hv)) : '',
    doc && ref ? ` from the reference point (${ref.map(fmtNum).join(', ')}), ${
      doc.reference_point_source === 'config' ? 'set in the config' : 'derived: the front\'s nadir plus 10% of its range'}.`
      : doc ? ' (no front yet).' : '');
    const n = Math.max(this.trials.length, hist.length ? hist[hist.length - 1].trials : 0, 1);
    const fx = scale([0, n], PAD.l, W - PAD.r, false);
    const fy = scale([0].concat(hist.map((p) => p.hypervolume)), HV_H - PAD.b, PAD.t, false);
    const g = svg('g');
    axes(g, fx, fy, 'trials (in the order they last changed)', 'hypervolume', HV_H);
    let d = `M${fx(0)},${fy(0)}`;
    for (const p of hist) d += ` H${fx(p.trials)} V${fy(p.hypervolume)}`;
    d += ` H${fx(n)}`;
    g.append(svg('path', { d, class: 'hv-line' }));
    for (const p of hist) {
      g.append(svg('circle', { cx: fx(p.trials), cy: fy(p.hypervolume), r: 3, class: 'hv-pt',
        'data-trials': p.trials, 'data-trial': p.trial_id, 'data-hv': String(p.hypervolume) },
      svg('title', null, `after ${p.trials} trials (trial ${p.trial_id}): ${fmtNum(p.hypervolume)}`)));
    }
    this.hv.replaceChildren(g);
  }
}
