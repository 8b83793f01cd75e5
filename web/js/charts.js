// Learning-curve charts on Debian's Chart.js (loaded on demand from /vendor/),
// with the best trial highlighted, ASHA milestones marked and click-through.
import { fmtNum } from './format.js';

const CHART_URLS = ['/vendor/chart.js/chart.min.js', '/vendor/chart.js/chart.umd.js'];
let chartPromise = null;

function loadScript(src) {
  return new Promise((resolve) => {
    const s = document.createElement('script');
    s.src = src;
    s.onload = () => resolve(true);
    s.onerror = () => { s.remove(); resolve(false); };
    document.head.append(s);
  });
}

// Resolves to the Chart constructor, or null when the server has no Chart.js.
export function loadChartJs() {
  if (!chartPromise) {
    chartPromise = (async () => {
      for (const url of CHART_URLS) {
        if (window.Chart) break;
        await loadScript(url);
      }
      return window.Chart || null;
    })();
  }
  return chartPromise;
}

export const NO_CHART_NOTE =
  'Charts are off: the server could not serve Chart.js at /vendor/chart.js/ ' +
  '(install Debian\'s libjs-chart.js or pass --vendor-dir). The tables show the same data.';

function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

// Draws ASHA's milestones as dashed verticals, with each one's cutoff as a short
// horizontal bar: where a trial below the bar was stopped.
const milestonePlugin = {
  id: 'ctuneMilestones',
  afterDatasetsDraw(chart, _args, opts) {
    const ms = opts && opts.milestones;
    if (!ms || !ms.length) return;
    const { ctx, chartArea: a, scales: { x, y } } = chart;
    ctx.save();
    ctx.font = '11px system-ui, sans-serif';
    const drawn = new Set(); // brackets may share a milestone: label it once
    for (const m of ms) {
      const px = x.getPixelForValue(m.t);
      if (px < a.left - 1 || px > a.right + 1) continue;
      ctx.strokeStyle = opts.color;
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(px, a.top);
      ctx.lineTo(px, a.bottom);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = opts.color;
      const label = `t=${m.t}`;
      if (!drawn.has(m.t)) {
        // Near the right edge the label goes on the line's left side.
        const right = px + 3 + ctx.measureText(label).width > a.right;
        ctx.textAlign = right ? 'right' : 'left';
        ctx.fillText(label, right ? px - 3 : px + 3, a.top + 11);
        drawn.add(m.t);
      }
      if (Number.isFinite(m.cutoff)) {
        const py = y.getPixelForValue(m.cutoff);
        if (py >= a.top && py <= a.bottom) {
          ctx.strokeStyle = opts.cutColor;
          ctx.lineWidth = 2.5;
          ctx.beginPath();
          ctx.moveTo(px - 9, py);
          ctx.lineTo(px + 9, py);
          ctx.stroke();
        }
      }
    }
    ctx.restore();
  },
};

// series: [{id, label, points: [{x, y}], best, stopped}]
export class CurveChart {
  constructor(Chart, canvas, { xLabel, yLabel, onPick }) {
    this.Chart = Chart;
    this.onPick = onPick;
    const grid = cssVar('--grid', 'rgba(128,128,128,0.2)');
    const text = cssVar('--muted', '#666');
    this.chart = new Chart(canvas, {
      type: 'line',
      data: { datasets: [] },
      plugins: [milestonePlugin],
      options: {
        animation: false,
        parsing: false,
        normalized: true,
        maintainAspectRatio: false,
        responsive: true,
        interaction: { mode: 'nearest', intersect: false, axis: 'xy' },
        elements: { point: { radius: 0, hitRadius: 6, hoverRadius: 4 }, line: { tension: 0 } },
        scales: {
          x: { type: 'linear', title: { display: true, text: xLabel, color: text },
               grid: { color: grid }, ticks: { color: text, precision: 0 } },
          y: { title: { display: true, text: yLabel, color: text },
               grid: { color: grid }, ticks: { color: text } },
        },
        plugins: {
          legend: { display: false },
          decimation: { enabled: false },
          tooltip: {
            callbacks: {
              title: (items) => items.length ? items[0].dataset.label : '',
              label: (item) => `${yLabel} ${fmtNum(item.parsed.y)} at ${xLabel} ${fmtNum(item.parsed.x)}`,
            },
          },
          ctuneMilestones: { milestones: [], color: text, cutColor: cssVar('--bad', '#c62828') },
        },
        onHover: (evt, els) => {
          evt.native.target.style.cursor = els.length ? 'pointer' : 'default';
        },
        onClick: (_evt, els) => {
          if (!els.length || !this.onPick) return;
          const ds = this.chart.data.datasets[els[0].datasetIndex];
          if (ds && ds.trialId !== undefined) this.onPick(ds.trialId);
        },
      },
    });
  }

  setData(series, milestones) {
    const accent = cssVar('--accent', '#1565c0');
    const others = series.filter((s) => !s.best);
    const best = series.filter((s) => s.best);
    const n = Math.max(others.length, 1);
    // Best last so it is drawn over the others; others share muted hues.
    this.chart.data.datasets = [...others, ...best].map((s, i) => ({
      label: s.label,
      trialId: s.id,
      data: s.points,
      borderColor: s.best ? accent : `hsla(${Math.round(200 + (i * 137) % 160)}, 45%, 55%, 0.55)`,
      backgroundColor: s.best ? accent : 'transparent',
      borderWidth: s.best ? 3.5 : 1.3,
      borderDash: s.stopped && !s.best ? [5, 3] : undefined,
      pointRadius: s.points.length <= 1 ? 2.5 : 0,
      order: s.best ? 0 : 1 + i / n,
    }));
    this.chart.options.plugins.ctuneMilestones.milestones = milestones || [];
    this.chart.update('none');
  }

  destroy() {
    this.chart.destroy();
  }
}

// True when the canvas has at least one painted pixel (used by the tests too).
export function canvasHasInk(canvas) {
  const ctx = canvas.getContext('2d');
  if (!ctx || !canvas.width || !canvas.height) return false;
  const d = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
  for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true;
  return false;
}
