// Parallel coordinates of hyperparameters against the metric on a plain canvas
// (no Chart.js needed): one polyline per trial, better trials drawn brighter and on top.
import { fmtNum } from './format.js';

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

// axes: [{label, log, values: [per row value]}]; rows are the trials in the same
// order; rank[i] in [0,1] is 0 for the best trial and 1 for the worst.
export function axisScale(values, log) {
  const nums = values.filter((v) => typeof v === 'number' && Number.isFinite(v) && (!log || v > 0));
  if (nums.length === values.filter((v) => v !== null && v !== undefined).length && nums.length) {
    let lo = Math.min(...nums), hi = Math.max(...nums);
    const f = log ? Math.log : (v) => v;
    const a = f(lo), b = f(hi);
    return {
      kind: 'num', lo, hi,
      pos: (v) => (typeof v === 'number' && Number.isFinite(v) && (!log || v > 0)
        ? (b === a ? 0.5 : (f(v) - a) / (b - a)) : null),
    };
  }
  // Strings, booleans or mixed values: evenly spaced categories, sorted.
  const cats = [...new Set(values.filter((v) => v !== null && v !== undefined).map((v) => JSON.stringify(v)))].sort();
  return {
    kind: 'cat', cats,
    pos: (v) => {
      const i = cats.indexOf(JSON.stringify(v));
      return i < 0 ? null : cats.length === 1 ? 0.5 : i / (cats.length - 1);
    },
  };
}

export function drawParcoords(canvas, axes, rank, bestIndex) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, hgt = canvas.clientHeight || 280;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(hgt * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, hgt);
  if (!axes.length) return;
  const padX = 56, top = 42, bottom = 24;
  const span = hgt - top - bottom;
  const xs = axes.map((_a, i) => (axes.length === 1 ? w / 2 : padX + (i * (w - 2 * padX)) / (axes.length - 1)));
  const scales = axes.map((a) => axisScale(a.values, a.log));
  const n = rank.length;
  const key = (i) => (Number.isFinite(rank[i]) ? rank[i] : 2);
  const order = [...rank.keys()].sort((a, b) => key(b) - key(a)); // unranked, then worst first
  const accent = cssVar('--accent', '#1565c0');
  // Many lines: the crowd stays faint (its density still shows where trials
  // went) and only the best few, at most 50, are drawn strong on top.
  const ranked = rank.filter(Number.isFinite).length;
  const strong = Math.max(5, Math.min(50, Math.ceil(ranked * 0.1)));
  const crowd = n <= 50 ? 0.7 : Math.min(0.35, Math.max(0.012, 25 / n));
  ctx.lineWidth = 1;
  for (const r of order) {
    if (r === bestIndex) continue;
    const q = rank[r];
    if (!Number.isFinite(q)) {
      ctx.strokeStyle = `hsla(220, 10%, 55%, ${crowd})`;
    } else {
      const isTop = q * (ranked - 1) < strong;
      ctx.lineWidth = isTop && n > 50 ? 1.5 : 1;
      ctx.strokeStyle = `hsla(${Math.round(210 - 180 * (1 - q))}, 75%, 50%, ${isTop ? 0.75 : crowd})`;
    }
    strokeRow(ctx, axes, scales, xs, r, top, span);
  }
  if (bestIndex >= 0) {
    ctx.strokeStyle = accent;
    ctx.lineWidth = 3;
    strokeRow(ctx, axes, scales, xs, bestIndex, top, span);
  }
  // Axes with their labels and extreme values on top of the lines.
  const fg = cssVar('--fg', '#222'), muted = cssVar('--muted', '#666'), halo = cssVar('--card', '#fff');
  ctx.lineWidth = 1;
  ctx.font = '12px system-ui, sans-serif';
  ctx.textAlign = 'center';
  axes.forEach((a, i) => {
    ctx.strokeStyle = muted;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(xs[i], top);
    ctx.lineTo(xs[i], top + span);
    ctx.stroke();
    ctx.fillStyle = fg;
    ctx.fillText(a.label + (a.log ? ' (log)' : ''), xs[i], 14);
    ctx.fillStyle = muted;
    const s = scales[i];
    if (s.kind === 'num') {
      ctx.fillText(fmtNum(s.hi), xs[i], top - 6);
      ctx.fillText(fmtNum(s.lo), xs[i], top + span + 16);
    } else {
      // Categories: each one named beside its place on the axis (when few enough).
      const show = s.cats.length <= 12 ? s.cats : [s.cats[0], s.cats[s.cats.length - 1]];
      ctx.textAlign = 'left';
      for (const c of show) {
        const y = top + span * (1 - s.pos(JSON.parse(c)));
        const ly = Math.min(Math.max(y + 4, top + 4), top + span);
        // A halo in the card's colour keeps the name legible over the lines.
        ctx.strokeStyle = halo;
        ctx.lineWidth = 3;
        ctx.strokeText(catLabel(c), xs[i] + 5, ly);
        ctx.fillText(catLabel(c), xs[i] + 5, ly);
      }
      ctx.textAlign = 'center';
    }
  });
}

function catLabel(json) {
  const v = JSON.parse(json);
  return typeof v === 'string' ? v : json;
}

function strokeRow(ctx, axes, scales, xs, r, top, span) {
  ctx.beginPath();
  let pen = false;
  for (let i = 0; i < axes.length; i++) {
    const p = scales[i].pos(axes[i].values[r]);
    if (p === null) { pen = false; continue; }
    const y = top + span * (1 - p);
    if (pen) ctx.lineTo(xs[i], y); else ctx.moveTo(xs[i], y);
    pen = true;
  }
  ctx.stroke();
}
