// One trial: status, config, error, results as a chart and a table, and its log.
import { api } from '../api.js';
import { h, note, statusBadge, section, infeasibleTag } from '../dom.js';
import { fmtNum, fmtValue, fmtTime, fmtDuration } from '../format.js';
import { loadChartJs, CurveChart, NO_CHART_NOTE } from '../charts.js';
import { poller } from '../poll.js';
import { getAll } from '../lists.js';
import { stopControl } from '../controls.js';

export const NAME = 'trial';

function resultsOf(data) {
  const list = Array.isArray(data) ? data : (data && data.results) || [];
  return list.map((r) => (r && typeof r.result === 'object' && r.result !== null ? r.result : r));
}

// One event of the trial's history as nodes. Exploits (PBT) are built from
// their data — "t=6 exploited trial 7: lr 0.01 → 0.012" with the donor
// linked — the others are their reason sentence.
// Config values as the decision's sentence has them (0.0008, not 8.000e-4).
const cfgVal = (v) => (typeof v === 'number' && Number.isFinite(v) ? String(Number(v.toPrecision(6))) : fmtValue(v));

export function eventText(ev) {
  const d = ev.data || {};
  if (ev.kind === 'exploited' && d.donor !== undefined && d.donor !== null && d.new_config) {
    const old = d.old_config || {};
    const changes = Object.entries(d.new_config)
      .filter(([k, v]) => !(k in old) || cfgVal(old[k]) !== cfgVal(v))
      .map(([k, v]) => `${k} ${k in old ? cfgVal(old[k]) : '?'} → ${cfgVal(v)}`);
    return [d.t !== undefined && d.t !== null ? `t=${fmtNum(d.t)} ` : '', 'exploited ',
      h('a', { href: `#/trials/${d.donor}`, class: 'donor' }, `trial ${d.donor}`),
      changes.length ? `: ${changes.join(', ')}` : ' (same config)'];
  }
  return ev.reason || ev.kind;
}

function dl(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

export function mount(main, [idStr], ctx) {
  const id = Number(idStr);
  document.title = `Trial ${id} · ctune`;
  const st = { trial: null, exp: null, results: [], seq: null, chart: null, metric: null, disposed: false, logAt: 0 };

  const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Experiments'), ' / ');
  const title = h('h1', null, `Trial ${id}`);
  const badge = h('span');
  const stopBox = h('span', { id: 'trial-controls' }); // Stop, not for a viewer
  const msg = h('div');
  const status = h('div', { id: 'trial-status' });
  const config = h('div', { id: 'trial-config' });
  const errorBox = h('div', { id: 'trial-error' });
  const metricSel = h('select', { id: 'trial-metric', onchange: (e) => { st.metric = e.target.value; renderChart(); } });
  const canvas = h('canvas', { id: 'trial-chart', role: 'img', 'aria-label': 'This trial\'s results over time' });
  const chartBox = h('div', { class: 'chart-box small-chart' }, canvas);
  const resultsBox = h('div', { id: 'trial-results' });
  const eventsBox = h('div', { id: 'trial-events' });
  const logBox = h('pre', { class: 'log', id: 'trial-log', tabindex: '0', 'aria-label': 'Trial log' });

  main.append(crumbs,
    h('div', { class: 'page-head' }, title, badge, h('span', { class: 'spacer' }), stopBox),
    msg,
    h('div', { class: 'grid2' }, section('Status', 'h-status', status), section('Config', 'h-config', config)),
    errorBox,
    section('History', 'h-events', h('p', { class: 'muted small' },
      'This trial\'s attempts and what the scheduler decided about it, oldest first: each lease (which worker, where it resumed), lost workers and expired leases, releases, failed attempts; stops, pauses, promotions, PBT exploits (donor and config change), stop rules, the time budget.'), eventsBox),
    section('Results over time', 'h-chart', h('div', { class: 'table-tools' },
      h('label', { for: 'trial-metric' }, 'Metric'), metricSel), chartBox),
    section('Results', 'h-results', resultsBox),
    section('Log', 'h-log', h('p', { class: 'muted small' }, 'The latest tail of the trial\'s stdout and stderr, as its worker sent it; with more than one attempt, each attempt\'s after a line naming it.'), logBox));

  const timeAttr = () => (st.exp && st.exp.scheduler && st.exp.scheduler.time_attr) || 'training_iteration';

  function renderTrial() {
    const t = st.trial;
    title.textContent = t.name || `Trial ${id}`;
    document.title = `${t.name || 'Trial ' + id} · ctune`;
    crumbs.replaceChildren(h('a', { href: '#/' }, 'Experiments'), ' / ',
      h('a', { href: `#/experiments/${t.experiment_id}` }, st.exp ? st.exp.name : `experiment ${t.experiment_id}`), ' / ');
    badge.replaceChildren(statusBadge(t.status, t.reason), t.stopped_early ? h('span', { class: 'tag' }, 'stopped early by the scheduler') : '',
      infeasibleTag(t) || '');
    stopBox.replaceChildren(stopControl(t, () => tick().catch(ctx.lostLive), { id: 'stop-trial' }) || '');
    const end = t.ended_at || (t.status === 'RUNNING' ? Date.now() / 1000 : null);
    const r = t.resources || {};
    status.replaceChildren(dl([
      ['Status', t.status + (t.stopped_early ? ' (stopped early)' : '')],
      ['Iteration', fmtNum(t.iteration)],
      t.reason ? ['Last decision', h('span', { id: 'trial-reason' }, t.reason)] : null,
      t.pending_reason ? ['Waiting because', t.pending_reason] : null,
      ['Worker', t.worker_id ? h('a', { href: '#/workers' }, `worker ${t.worker_id}`) : '—'],
      ['Resources', `${r.cpu ?? 0} cpu · ${r.gpu ?? 0} gpu${r.memory_mb ? ` · ${r.memory_mb} MB` : ''}`],
      ['Created', fmtTime(t.created_at)],
      ['Started', fmtTime(t.started_at)],
      ['Ended', fmtTime(t.ended_at)],
      ['Run time', t.started_at && end ? fmtDuration(end - t.started_at) : '—'],
      ['Failures', fmtNum(t.num_failures ?? 0)],
      // Several objectives: its non-dominated sorting rank (1: on the front).
      'pareto_rank' in t ? ['Pareto rank', h('span', { id: 'pareto-rank', dataset: { rank: t.pareto_rank ?? '' } },
        t.pareto_rank === null ? '— (an objective has no value)'
          : t.pareto_rank === 1 ? '1 (on the Pareto front)' : String(t.pareto_rank))] : null,
      t.exit_code !== null && t.exit_code !== undefined ? ['Exit code', String(t.exit_code)] : null,
    ]));
    const cfg = t.config || {};
    config.replaceChildren(Object.keys(cfg).length
      ? h('table', { class: 'data compact', id: 'config-table' },
        h('caption', { class: 'sr-only' }, 'Trial configuration'),
        h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Key'), h('th', { scope: 'col' }, 'Value'))),
        h('tbody', null, Object.entries(cfg).map(([k, v]) => h('tr', null, h('th', { scope: 'row' }, k), h('td', { class: 'num' }, fmtValue(v))))))
      : note('This trial has an empty config.'));
    renderEvents(t);
    errorBox.replaceChildren(t.error
      ? h('section', { class: 'card error-card', 'aria-labelledby': 'h-error' },
        h('h2', { id: 'h-error' }, 'Error'),
        // docs/scheduling.md#failures-told-apart: who its last failure is on.
        t.attribution ? h('p', { id: 'trial-attribution' }, 'Attribution: ',
          h('span', { class: `tag attr attr-${t.attribution}` }, t.attribution)) : null,
        h('pre', { class: 'log', role: 'alert' }, String(t.error)))
      : '');
  }

  function renderEvents(t) {
    if (!Array.isArray(t.events)) {
      eventsBox.replaceChildren(note('This server does not record decisions (it predates them).'));
      return;
    }
    // Decisions and attempts (a server that predates attempts sends none) as
    // one history, in the order they happened.
    const all = t.events.concat(Array.isArray(t.attempts) ? t.attempts : [])
      .sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0));
    if (!all.length) {
      eventsBox.replaceChildren(note('No decision about this trial yet.'));
      return;
    }
    eventsBox.replaceChildren(h('ol', { class: 'events', id: 'events-list' }, all.map((ev) =>
      h('li', { dataset: { kind: ev.kind } },
        h('span', { class: 'when' }, fmtTime(ev.time)),
        h('span', { class: 'kind k-' + ev.kind }, String(ev.kind || '?').replace('_', ' ')),
        h('span', { class: 'what' }, eventText(ev))))));
  }

  function renderResults() {
    const rs = st.results;
    if (!rs.length) {
      resultsBox.replaceChildren(note('No results reported yet.'));
      return;
    }
    const keys = [];
    const seen = new Set();
    const ta = timeAttr();
    for (const r of rs) for (const k of Object.keys(r)) if (!seen.has(k)) { seen.add(k); keys.push(k); }
    keys.sort((a, b) => (a === ta ? -1 : b === ta ? 1 : 0));
    resultsBox.replaceChildren(h('div', { class: 'scroll tall' }, h('table', { class: 'data compact', id: 'results-table' },
      h('caption', { class: 'sr-only' }, 'Results in the order they were reported'),
      h('thead', null, h('tr', null, keys.map((k) => h('th', { scope: 'col', class: 'num' }, k)))),
      h('tbody', null, rs.map((r) => h('tr', null, keys.map((k, i) => (i === 0
        ? h('th', { scope: 'row', class: 'num' }, fmtValue(r[k]))
        : h('td', { class: 'num' }, fmtValue(r[k]))))))))));
    const numeric = keys.filter((k) => k !== ta && rs.some((r) => typeof r[k] === 'number'));
    if (!st.metric || !numeric.includes(st.metric)) st.metric = numeric.includes(st.exp?.metric) ? st.exp.metric : numeric[0];
    if (metricSel.options.length !== numeric.length) {
      metricSel.replaceChildren(...numeric.map((k) => h('option', { value: k, selected: k === st.metric }, k)));
    }
  }

  function renderChart() {
    if (!st.chart || !st.metric) return;
    const ta = timeAttr();
    const pts = st.results.filter((r) => typeof r[ta] === 'number')
      .map((r) => ({ x: r[ta], y: typeof r[st.metric] === 'number' ? r[st.metric] : null }));
    st.chart.chart.options.scales.y.title.text = st.metric;
    st.chart.chart.options.scales.x.title.text = ta;
    const s = (st.exp && st.exp.scheduler) || {};
    const ms = [];
    if (st.metric === st.exp?.metric && Array.isArray(s.brackets)) {
      for (const b of s.brackets) for (const m of b.milestones || []) ms.push(m);
    }
    st.chart.setData([{ id, label: st.trial.name || `trial ${id}`, points: pts, best: true }], ms);
  }

  async function loadLog() {
    try {
      const l = await api.get(`/trials/${id}/logs`);
      const text = (l && l.log) || '';
      const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
      logBox.textContent = text || '(no log yet)';
      if (atBottom) logBox.scrollTop = logBox.scrollHeight;
    } catch (e) {
      logBox.textContent = e.status === 404 ? '(no log yet)' : `Could not load the log: ${e.message}`;
    }
    st.logAt = Date.now();
  }

  async function tick() {
    const t = await api.get(`/trials/${id}`);
    if (st.disposed) return false;
    const changed = !st.trial || t.updated_seq !== st.seq || t.status !== st.trial.status;
    st.trial = t;
    if (changed) {
      st.seq = t.updated_seq;
      if (!st.exp || t.status !== 'RUNNING') {
        try { st.exp = await api.get(`/experiments/${t.experiment_id}`); } catch (e) { /* the trial still shows */ }
      }
      st.results = resultsOf(await getAll(`/trials/${id}/results`, 'results'));
      if (st.disposed) return false;
      renderTrial();
      renderResults();
      renderChart();
    }
    if (changed || (t.status === 'RUNNING' && Date.now() - st.logAt > 3000)) await loadLog();
    ctx.setLive('live · updated ' + new Date().toLocaleTimeString());
    if (p) p.setInterval(t.status === 'RUNNING' || t.status === 'PENDING' ? 1000 : 5000);
    return false;
  }

  let p = null;
  (async () => {
    try {
      const chartPromise = loadChartJs();
      await tick();
      const Chart = await chartPromise;
      if (st.disposed) return;
      if (Chart) {
        st.chart = new CurveChart(Chart, canvas, { xLabel: timeAttr(), yLabel: st.metric || 'value' });
        renderChart();
      } else {
        chartBox.replaceWith(note(NO_CHART_NOTE, 'warn'));
      }
      ctx.ready();
      p = poller(tick, 1000, ctx.lostLive);
    } catch (err) {
      msg.replaceChildren(note(err.status === 404 ? `There is no trial ${id}.` : `Could not load trial ${id}: ${err.message}`, 'error'));
      ctx.ready();
    }
  })();
  return () => {
    st.disposed = true;
    if (p) p.stop();
    if (st.chart) st.chart.destroy();
  };
}
