// One experiment: config brief, progress, best trial, learning curves, ASHA
// state, parallel coordinates and the trial table, kept live by ?since= polling.
import { api } from '../api.js';
import { h, note, statusBadge, section, expStatusBadge, allTrialsFailed, infeasibleTag } from '../dom.js';
import { fmtNum, fmtValue, fmtTime, fmtDuration, bestFirst } from '../format.js';
import { PagedTable } from '../table.js';
import { loadChartJs, CurveChart, NO_CHART_NOTE } from '../charts.js';
import { drawParcoords } from '../parcoords.js';
import { poller } from '../poll.js';
import { getAll } from '../lists.js';
import { ExperimentControls, stopControl, tagChips, canControl } from '../controls.js';
import { ParetoView } from '../pareto.js';
import { renderFailures } from '../failures.js';

export const NAME = 'experiment';
const MAX_CURVES = 40;       // curves drawn: the best, the running ones, then the top by metric
const RESULTS_LIMIT = 5000;  // results per incremental poll; more pending → poll again at once
const STATUSES = ['PENDING', 'RUNNING', 'PAUSED', 'TERMINATED', 'ERROR'];
// docs/scheduling.md#failures-told-apart: who a trial's last failure is blamed on.
const ATTRIBUTIONS = ['config', 'machine', 'user_code', 'resource', 'unknown'];
// A running experiment changes all the time; a paused one still does while
// its trials' leases end (each then turns PAUSED): both follow the changes
// at once. A finished one only gets the slow poll.
const followsFast = (e) => e.status === 'RUNNING' || e.status === 'PAUSED';
const LOG_TYPES = new Set(['loguniform', 'qloguniform', 'lograndint', 'pow2']);
const ROW_STOP = new Set(['RUNNING']); // trial rows with a Stop button
// The page shows the first FIRST_PAGE trials as soon as they come,
// then reads the rest REST_PAGE at a time in the background, drawing once a
// page (a 100,000-trial list is ~50 MB of JSON: waiting for all of it took
// 3.5 s before anything showed).
const FIRST_PAGE = 1000;
const REST_PAGE = 10000;
const PC_LOADING_MS = 3000; // parallel coordinates redrawn at most this often while loading

function resultsOf(data) {
  const list = Array.isArray(data) ? data : (data && data.results) || [];
  return list.map((r) => (r && typeof r.result === 'object' && r.result !== null ? r.result : r));
}

function spaceBrief(name, dom) {
  if (dom === null || typeof dom !== 'object') return `${name} = ${fmtValue(dom)}`;
  if (Array.isArray(dom.grid_search)) return `${name}: grid ${dom.grid_search.map(fmtValue).join(', ')}`;
  if (dom.type === 'choice') return `${name}: choice ${(dom.values || []).map(fmtValue).join(', ')}`;
  if (dom.type === 'randn') return `${name}: randn mean ${fmtNum(dom.mean)} sd ${fmtNum(dom.sd)}`;
  if ('lower' in dom) return `${name}: ${dom.type} [${fmtNum(dom.lower)}, ${fmtNum(dom.upper)}${
    dom.type && dom.type.includes('randint') ? ')' : ']'}${dom.q !== undefined ? ' q ' + fmtNum(dom.q) : ''}`;
  return `${name}: ${JSON.stringify(dom)}`;
}

const SCHED_NAMES = { fifo: 'FIFO', asha: 'ASHA', hyperband: 'HyperBand', pbt: 'PBT',
  median_stopping: 'Median stopping' };

// The scheduler's scalar settings ("max_t 9, reduction_factor 3"), whatever its type.
function schedSettings(s) {
  return Object.entries(s).filter(([k, v]) => k !== 'type' && k !== 'time_attr' &&
    (typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean'))
    .map(([k, v]) => `${k} ${fmtValue(v)}`).join(', ');
}

function schedBrief(s) {
  if (!s || !s.type) return 'FIFO';
  if (s.type === 'asha' && !s.promotion) {
    const nb = Array.isArray(s.brackets) ? s.brackets.length : s.brackets;
    return `ASHA on ${s.time_attr || 'training_iteration'}: max_t ${s.max_t}, grace ${s.grace_period}, ` +
      `reduction ${s.reduction_factor}, ${nb} bracket${nb === 1 ? '' : 's'}`;
  }
  if (s.type === 'fifo') return 'FIFO';
  const name = s.type === 'asha' ? 'ASHA (promotion)' : (SCHED_NAMES[s.type] || s.type);
  const rest = schedSettings(s);
  return `${name}${s.time_attr ? ' on ' + s.time_attr : ''}${rest ? ': ' + rest : ''}`;
}

// "tpe" or {"type": "tpe", ...} (the experiment's search_alg, or its config's).
function searchBrief(e) {
  const cfg = (e.config && e.config.search_alg) || null;
  const type = typeof e.search_alg === 'string' ? e.search_alg
    : (e.search_alg && e.search_alg.type) || (cfg && cfg.type) || 'random';
  return type === 'tpe' ? 'TPE' : type;
}

// Why the scheduler last decided about a trial: one line, cut by CSS, whole in the tooltip.
function reasonCell(t) {
  return t.reason ? h('span', { class: 'reason', title: t.reason }, t.reason) : h('span', { class: 'muted' }, '—');
}

function trainableBrief(t) {
  if (!t) return '—';
  if (t.type === 'builtin') return `built-in ${t.model || ''} on ${t.dataset || ''}`;
  if (t.type === 'command') return `command: ${(t.argv || []).join(' ')}`;
  return JSON.stringify(t);
}

function dl(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

export function mount(main, [idStr], ctx) {
  const id = Number(idStr);
  document.title = `Experiment ${id} · ctune`;
  const st = {
    exp: null, trials: new Map(), curves: new Map(), fetching: new Set(), early: new Map(),
    trialSeq: 0, resultSeq: 0, chart: null, chartOff: false, disposed: false,
    hp: [], metrics: [], trialsChanged: true, ranked: null, pcAt: 0,
    hpSet: null, hpList: [], mset: null,
    // The background read of the trial list: the next page's cursor (null
    // once all are in), the server's count of them, the best trial fetched
    // on its own while its page has not come yet.
    cursor: null, listTotal: 0, loadError: null, bestAsked: new Set(),
    // Several objectives: the Pareto view, and whether the front is to be
    // read again (trials changed since the last read) or is being read.
    pareto: null, paretoDirty: true, paretoBusy: false,
  };

  const title = h('h1', null, `Experiment ${id}`);
  const badge = h('span');
  const cancelBtn = h('button', { type: 'button', class: 'danger', id: 'cancel-experiment', hidden: true,
    onclick: () => cancel() }, 'Cancel experiment');
  const msg = h('div', { id: 'experiment-messages' });
  // "loaded 12,000 of 100,000 trials" while the list still comes in.
  const loadLine = h('p', { id: 'trials-loaded', class: 'loading-line', role: 'status', hidden: true });
  // The controls; after a change the page redraws from the server's answer.
  const controls = new ExperimentControls(id, { refresh: (e) => refresh(e) });
  const meta = h('div', { id: 'experiment-meta', class: 'meta' });
  const brief = h('div');
  const progress = h('div');
  const best = h('div', { id: 'best-trial' });
  const curvesNote = h('p', { class: 'muted small' });
  const curvesCanvas = h('canvas', { id: 'curves', role: 'img', 'aria-label': 'Learning curves' });
  const curvesBox = h('div', { class: 'chart-box' }, curvesCanvas);
  const asha = h('div', { id: 'asha-state' });
  const pcCanvas = h('canvas', { id: 'parcoords', role: 'img',
    'aria-label': 'Parallel coordinates of hyperparameters against the metric' });
  const pcNote = h('p', { class: 'muted small' });
  const table = new PagedTable({ caption: 'Trials', columns: [], statuses: STATUSES, attributions: ATTRIBUTIONS, idPrefix: 'trials' });
  // The failure view: shown once a trial failed.
  const failBox = h('div', { id: 'failures' });
  const failSection = section('Failures by error signature', 'h-failures', failBox);
  failSection.hidden = true;
  const failState = { chosen: null, key: '' };
  const paretoBox = h('div', { id: 'pareto' });
  const paretoSection = section('Pareto front', 'h-pareto', paretoBox);
  paretoSection.hidden = true;

  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, 'Experiments'), ' / '),
    h('div', { class: 'page-head' }, title, badge, h('span', { class: 'spacer' }), controls.el, cancelBtn),
    meta,
    msg,
    loadLine,
    h('div', { class: 'grid3' },
      section('Configuration', 'h-config', brief),
      section('Progress', 'h-progress', progress),
      section('Best trial', 'h-best', best)),
    paretoSection,
    section('Learning curves', 'h-curves', curvesNote, curvesBox),
    h('div', { class: 'grid2' },
      section('Scheduler state', 'h-asha', asha),
      section('Hyperparameters against the metric', 'h-pc', pcNote, h('div', { class: 'pc-box' }, pcCanvas))),
    failSection,
    section('Trials', 'h-trials', table.el));

  const metricOf = (t) => {
    const v = t.last_result ? t.last_result[st.exp.metric] : undefined;
    return typeof v === 'number' ? v : null;
  };
  const timeAttr = () => (st.exp.scheduler && st.exp.scheduler.time_attr) ||
    (st.exp.config && st.exp.config.scheduler && st.exp.config.scheduler.time_attr) || 'training_iteration';

  // The best trial never is an ERROR one (the server's pick counts every
  // trial's results): then the best of the others that are loaded.
  function bestId() {
    if (allTrialsFailed(st.exp) || several()) return null;
    const sb = st.exp.best && st.exp.best.trial_id !== undefined ? st.exp.best.trial_id : null;
    if (sb !== null && (!st.trials.has(sb) || st.trials.get(sb).status !== 'ERROR')) return sb;
    let b = null;
    const c = bestFirst(st.exp.mode);
    for (const t of st.trials.values()) {
      if (t.status === 'ERROR') continue;
      const v = metricOf(t);
      if (Number.isFinite(v) && (b === null || c(v, metricOf(b)) < 0)) b = t;
    }
    return b ? b.id : null;
  }

  // Column keys seen so far; each trial is scanned when it arrives or changes,
  // so a live tick costs its changed trials, not all of them.
  function noteKeys(list) {
    const space = (st.exp.config && st.exp.config.param_space) || {};
    if (!st.hpSet) {
      st.hpList = Object.keys(space).filter((k) => space[k] !== null && typeof space[k] === 'object');
      st.hpSet = new Set(st.hpList);
      st.mset = new Set();
    }
    for (const t of list) {
      for (const k of Object.keys(t.config || {})) {
        if (!(k in space) && !st.hpSet.has(k)) { st.hpList.push(k); st.hpSet.add(k); }
      }
      if (t.last_result) for (const k of Object.keys(t.last_result)) st.mset.add(k);
      if (t.reason) st.hasReason = true;
    }
  }

  // Columns: one per hyperparameter (sampled, not constant) and per reported metric.
  function updateColumns() {
    const hp = st.hpList.slice();
    const mset = new Set(st.mset);
    mset.delete(timeAttr());
    const metric = st.exp.metric;
    const metrics = [...mset].sort((a, b) => (a === metric ? -1 : b === metric ? 1 : a.localeCompare(b)));
    if (!mset.has(metric)) metrics.unshift(metric);
    const same = hp.join('\u0000') === st.hp.join('\u0000') && metrics.join('\u0000') === st.metrics.join('\u0000') &&
      Boolean(st.hasReason) === Boolean(st.reasonShown) && canControl() === st.stopShown &&
      failState.any === st.attrShown;
    if (same && table.columns.length) return;
    st.reasonShown = Boolean(st.hasReason);
    st.attrShown = failState.any;
    st.stopShown = canControl();
    st.hp = hp;
    st.metrics = metrics;
    const bid = () => bestId();
    table.setColumns([
      { key: 'name', label: 'Trial', get: (t) => t.name || t.id,
        render: (t) => [h('a', { href: `#/trials/${t.id}` }, t.name || `trial ${t.id}`),
          t.id === bid() ? h('span', { class: 'tag best' }, 'best') : null] },
      { key: 'status', label: 'Status', get: (t) => t.status,
        render: (t) => [statusBadge(t.status, t.pending_reason || t.reason), t.stopped_early ? h('span', { class: 'tag' }, 'stopped') : null,
          infeasibleTag(t)] },
      // The scheduler's last decision: only once a trial has one.
      ...(st.reasonShown ? [{ key: 'reason', label: 'Reason', get: (t) => t.reason || null, render: reasonCell }] : []),
      // Who its last failure is on: only once a trial failed.
      ...(st.attrShown ? [{ key: 'attribution', label: 'Failure', get: (t) => t.attribution || null,
        render: (t) => (t.attribution ? h('span', { class: `tag attr attr-${t.attribution}`, title: t.error_signature || null },
          t.attribution) : null) }] : []),
      { key: 'iteration', label: timeAttr() === 'training_iteration' ? 'Iter' : timeAttr(), numeric: true,
        get: (t) => t.iteration ?? (t.last_result ? t.last_result[timeAttr()] : null) },
      ...hp.map((k) => ({ key: 'c:' + k, label: k, group: 'Hyperparameters', numeric: true,
        get: (t) => (t.config ? t.config[k] : null) })),
      ...metrics.map((k) => ({ key: 'm:' + k, label: k, group: 'Last result', numeric: true,
        get: (t) => (t.last_result ? t.last_result[k] : null) })),
      // Stop on each running trial's row (not for a viewer).
      ...(st.stopShown ? [{ key: 'actions', label: 'Actions', get: (t) => (ROW_STOP.has(t.status) ? 0 : 1),
        render: (t) => stopControl(t, () => refresh(), { statuses: ROW_STOP }) }] : []),
    ]);
    if (!table.sortKey) {
      table.sortKey = 'm:' + metric;
      table.sortDir = st.exp.mode === 'max' ? -1 : 1;
      table.renderHead();
    }
  }

  function renderHead() {
    const e = st.exp;
    title.textContent = e.name || `Experiment ${id}`;
    document.title = `${e.name} · ctune`;
    badge.replaceChildren(expStatusBadge(e));
    cancelBtn.hidden = !canControl() || (e.status !== 'RUNNING' && e.status !== 'PAUSED');
    controls.update(e);
    meta.replaceChildren(
      e.tags && e.tags.length ? h('span', { class: 'chips', id: 'experiment-tags' }, tagChips(e.tags)) : '',
      e.notes ? h('p', { class: 'exp-notes', id: 'experiment-notes' }, e.notes) : '');
    const cfg = e.config || {};
    const space = cfg.param_space || {};
    brief.replaceChildren(dl([
      ['Metric', `${e.metric} (${e.mode})`],
      ['Samples', `${cfg.num_samples ?? e.num_trials}${(e.max_concurrent_trials ?? cfg.max_concurrent_trials)
        ? `, at most ${e.max_concurrent_trials ?? cfg.max_concurrent_trials} at once` : ''}`],
      e.priority !== undefined ? ['Priority', h('span', { id: 'experiment-priority' }, fmtNum(e.priority))] : null,
      ['Scheduler', schedBrief(e.scheduler || cfg.scheduler)],
      ['Search', searchBrief(e)],
      ['Trainable', trainableBrief(cfg.trainable)],
      cfg.seed !== undefined ? ['Seed', String(cfg.seed)] : null,
      ['Search space', h('ul', { class: 'plain' }, Object.keys(space).map((k) => h('li', null, spaceBrief(k, space[k]))))],
      ['Started', fmtTime(e.created_at)],
      ['Duration', fmtDuration((e.ended_at || Date.now() / 1000) - e.created_at)],
    ]));
    const c = e.counts || {};
    const total = e.num_trials || 0;
    const done = (c.TERMINATED || 0) + (c.ERROR || 0);
    progress.replaceChildren(
      h('progress', { id: 'experiment-progress', max: total || 1, value: done,
        'aria-label': `${done} of ${total} trials done` }),
      h('p', { class: 'big' }, `${done} of ${total} trials done`),
      // Trials are created on demand: how many exist so far.
      Number.isFinite(e.num_created) && e.num_created < total
        ? h('p', { class: 'muted small', id: 'created-count' }, `${e.num_created} of ${total} created so far`) : '',
      h('ul', { class: 'counts' }, STATUSES.map((s) => h('li', null, statusBadge(s), ` ${c[s] || 0}`))),
      preemptionsNote(e.preemptions));
    const bid = bestId();
    const b = st.trials.get(bid);
    if (!b && bid !== null && bid !== undefined) {
      // Its page has not come yet: read it alone, once.
      best.replaceChildren(note(`Trial ${bid} (loading…)`));
      fetchBest(bid);
    } else if (allTrialsFailed(e)) {
      best.replaceChildren(note('Every trial ended in ERROR: there is no best trial. Their errors are on their trial pages.', 'error'));
    } else if (several()) {
      best.replaceChildren(note(`${e.metrics.length} objectives: no single best trial. The Pareto front below holds the trials no other beats on all of them.`));
    } else if (!b) {
      best.replaceChildren(note(`No trial has reported ${e.metric} yet.`));
    } else {
      best.replaceChildren(
        h('p', { class: 'big' }, h('a', { href: `#/trials/${b.id}` }, b.name || `trial ${b.id}`)),
        h('p', null, h('span', { class: 'metric-value' }, fmtNum(metricOf(b))), ` ${e.metric} at ${timeAttr()} ${fmtNum(b.iteration)}`),
        dl(Object.entries(b.config || {}).map(([k, v]) => [k, fmtValue(v)])));
    }
    renderAsha();
  }

  // Preemptions are not failures: how often its trials' machines went away
  // and the work lost (docs/scheduling.md#preemption).
  function preemptionsNote(p) {
    if (!p || !(p.count > 0)) return '';
    return h('p', { class: 'muted small', id: 'preemptions' },
      `Preempted ${p.count} time${p.count === 1 ? '' : 's'} (not failures): ` +
      `${fmtNum(p.lost_iterations)} iteration${p.lost_iterations === 1 ? '' : 's'} and ` +
      `${fmtNum(p.lost_seconds)} s of work lost`);
  }

  // Several objectives: the scatter follows the trials at each update, the
  // front (and its hypervolume) is read again when trials changed, one read
  // at a time.
  const several = () => Array.isArray(st.exp.metrics) && st.exp.metrics.length > 1;
  function renderPareto() {
    if (!several()) return;
    if (!st.pareto) {
      st.pareto = new ParetoView(st.exp.metrics, st.exp.modes);
      paretoBox.replaceChildren(st.pareto.el);
      paretoSection.hidden = false;
    }
    st.pareto.setTrials([...st.trials.values()]);
    if (st.paretoDirty && !st.paretoBusy) readFront();
  }

  async function readFront() {
    st.paretoDirty = false;
    st.paretoBusy = true;
    try {
      const doc = await api.get(`/experiments/${id}/pareto`);
      if (!st.disposed) st.pareto.setFront(doc);
    } catch (e) {
      console.warn('ctune: pareto front', e);
      st.paretoDirty = true;
    } finally {
      st.paretoBusy = false;
    }
  }

  function renderAsha() {
    const s = st.exp.scheduler || {};
    if (!s.type || s.type === 'fifo') {
      asha.replaceChildren(note(`${schedBrief(s)}: every trial runs to its end, so there are no milestones.`));
      return;
    }
    if (s.type !== 'asha' || !Array.isArray(s.brackets)) {
      // HyperBand, PBT, median stopping: their settings, and where each
      // trial stands is in the Reason column and on the trial pages.
      const c = st.exp.counts || {};
      asha.replaceChildren(dl([
        ['Scheduler', schedBrief(s)],
        ['Paused', `${c.PAUSED || 0} trial${c.PAUSED === 1 ? '' : 's'} (resources freed, checkpoint kept on the server)`],
      ]), h('p', { class: 'muted small' }, 'Each trial\'s last decision (stopped, paused, promoted, exploited) is in the Reason column; its history is on its trial page.'));
      return;
    }
    const rows = [];
    for (const b of s.brackets) {
      const ms = b.milestones || [];
      ms.forEach((m, i) => rows.push(h('tr', null,
        i === 0 ? h('th', { scope: 'rowgroup', rowspan: ms.length }, `${b.index}`, h('div', { class: 'muted small' }, `${b.stopped ?? 0} stopped`)) : null,
        h('td', { class: 'num' }, fmtNum(m.t)),
        h('td', { class: 'num' }, fmtNum(m.recorded)),
        h('td', { class: 'num' }, m.cutoff === null || m.cutoff === undefined ? h('span', { class: 'muted' }, 'none yet') : fmtNum(m.cutoff)))));
    }
    asha.replaceChildren(h('div', { class: 'scroll' }, h('table', { class: 'data compact', id: 'asha-table' },
      h('caption', { class: 'sr-only' }, 'ASHA brackets and milestones'),
      h('thead', null, h('tr', null, ['Bracket', 'Milestone', 'Recorded', 'Cutoff']
        .map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, rows))),
    h('p', { class: 'muted small' }, `Milestones are in ${s.time_attr || 'training_iteration'}, cutoffs in ${st.exp.metric}: a trial worse than the cutoff when it reaches a milestone stops there.`));
  }

  // Trials with a finite metric, best first; sorted once per change of the trials.
  function rankedTrials() {
    if (!st.ranked) {
      const c = bestFirst(st.exp.mode);
      st.ranked = [...st.trials.values()].filter((t) => Number.isFinite(metricOf(t)))
        .sort((x, y) => c(metricOf(x), metricOf(y)));
    }
    return st.ranked;
  }

  function curveIds() {
    const ids = new Set();
    const b = bestId();
    if (b !== null) ids.add(b);
    for (const t of st.trials.values()) {
      if (ids.size >= MAX_CURVES / 2) break;
      if (t.status === 'RUNNING') ids.add(t.id);
    }
    for (const t of rankedTrials()) {
      if (ids.size >= MAX_CURVES) break;
      ids.add(t.id);
    }
    return ids;
  }

  async function fetchCurves(ids) {
    const todo = [...ids].filter((i) => !st.curves.has(i) && !st.fetching.has(i));
    todo.forEach((i) => st.fetching.add(i));
    const worker = async () => {
      while (todo.length && !st.disposed) {
        const tid = todo.shift();
        try {
          const rs = resultsOf(await getAll(`/trials/${tid}/results`, 'results'));
          const pts = st.curves.get(tid) || new Map();
          for (const r of rs) addPoint(pts, r);
          // Results that arrived by ?since= while this fetch was in flight.
          for (const r of st.early.get(tid) || []) addPoint(pts, r);
          st.curves.set(tid, pts);
        } catch (e) {
          console.warn('ctune: results of trial', tid, e);
        } finally {
          st.fetching.delete(tid);
          st.early.delete(tid);
        }
      }
    };
    await Promise.all([1, 2, 3, 4, 5, 6].map(worker));
  }

  function addPoint(pts, r) {
    const x = r[timeAttr()], y = r[st.exp.metric];
    if (typeof x === 'number' && (typeof y === 'number' || y === null)) pts.set(x, y);
  }

  function renderCurves() {
    const ids = curveIds();
    // Curves that dropped out of the drawn set are forgotten past a bound, so a
    // long experiment does not keep every trial's results in memory.
    if (st.curves.size > 3 * MAX_CURVES) {
      for (const tid of [...st.curves.keys()]) if (!ids.has(tid)) st.curves.delete(tid);
    }
    const withData = [...st.curves.keys()].filter((i) => st.trials.has(i) && (ids.has(i) || st.curves.size <= MAX_CURVES));
    const total = [...st.trials.values()].filter((t) => t.last_result).length;
    if (!st.chart) { curvesNote.textContent = ''; return; }
    curvesNote.textContent = (withData.length < total
      ? `${withData.length} of ${total} trials with results: the best, the running ones and the top by ${st.exp.metric}. `
      : '') + 'The best trial is the thick line; dashed lines were stopped early; dashed verticals are ASHA milestones, red bars their cutoffs. Click a line to open its trial.';
    const b = bestId();
    const series = withData.map((tid) => {
      const t = st.trials.get(tid);
      const pts = [...st.curves.get(tid).entries()].sort((p, q) => p[0] - q[0]).map(([x, y]) => ({ x, y }));
      return { id: tid, label: t.name || `trial ${tid}`, points: pts, best: tid === b, stopped: t.stopped_early };
    });
    const s = st.exp.scheduler || {};
    const ms = [];
    if (Array.isArray(s.brackets)) for (const br of s.brackets) for (const m of br.milestones || []) ms.push(m);
    st.chart.setData(series, ms);
  }

  function renderParcoords() {
    const rows = [...st.trials.values()];
    const space = (st.exp.config && st.exp.config.param_space) || {};
    const axes = st.hp.map((k) => ({ label: k, log: Boolean(space[k] && LOG_TYPES.has(space[k].type)),
      values: rows.map((t) => (t.config ? t.config[k] : null)) }));
    axes.push({ label: st.exp.metric, log: false, values: rows.map(metricOf) });
    const ranked = rankedTrials();
    const place = new Map(ranked.map((t, k) => [t.id, k]));
    const rank = rows.map((t) => (place.has(t.id)
      ? (ranked.length > 1 ? place.get(t.id) / (ranked.length - 1) : 0) : NaN));
    const b = bestId();
    pcNote.textContent = `${ranked.length.toLocaleString()} trials with ${st.exp.metric}; brighter and warmer is better, the best is the thick line. The trial table holds the same numbers.`;
    drawParcoords(pcCanvas, axes, rank, rows.findIndex((t) => t.id === b));
    st.pcAt = performance.now();
  }

  // fromList: a page of the whole list, read while live updates go on. Its
  // trials never move trialSeq (a later page may hold a trial changed after
  // an earlier page was read: ?since= must still bring that change), and a
  // copy older than the one held (a live update came first) is dropped.
  function applyTrials(list, fromList) {
    noteKeys(list);
    for (const t of list) {
      const old = st.trials.get(t.id);
      if (old && Number.isFinite(old.updated_seq) && Number.isFinite(t.updated_seq) &&
          t.updated_seq < old.updated_seq) continue;
      st.trials.set(t.id, t);
      if (!fromList && Number.isFinite(t.updated_seq)) st.trialSeq = Math.max(st.trialSeq, t.updated_seq);
    }
    if (list.length) {
      st.trialsChanged = true;
      st.paretoDirty = true;
      st.ranked = null;
      table.setRows([...st.trials.values()]);
    }
  }

  async function fetchBest(tid) {
    if (st.bestAsked.has(tid)) return;
    st.bestAsked.add(tid);
    try {
      const t = await api.get(`/trials/${tid}`);
      if (st.disposed || !t || t.id !== tid) return;
      delete t.events;
      applyTrials([t], true);
      renderHead();
      table.render();
      renderLoadState();
    } catch (e) {
      console.warn('ctune: best trial', tid, e);
    }
  }

  // How much of the list is in: the line at the top, and the table's note
  // that its sort and filter cover only that much.
  function renderLoadState() {
    if (st.cursor === null && !st.loadError) {
      loadLine.hidden = true;
      table.setScope('');
      return;
    }
    const n = st.trials.size;
    const total = Math.max(st.listTotal || 0, n);
    loadLine.hidden = false;
    loadLine.dataset.loaded = n;
    loadLine.dataset.total = total;
    loadLine.textContent = `loaded ${n.toLocaleString()} of ${total.toLocaleString()} trials` +
      (st.loadError ? ` · reading the rest failed (${st.loadError}); retrying` : '; the rest are on their way');
    table.setScope(`sort and filter cover the ${n.toLocaleString()} trials loaded so far`);
  }

  // The rest of the list after the first page, REST_PAGE at a time, each
  // page drawn as it comes (one render a page, not a trial).
  async function loadRest() {
    if (typeof st.cursor !== 'string') {
      window.__ctune.allTrialsAt = performance.now(); // one page held them all
      return;
    }
    let failures = 0;
    while (typeof st.cursor === 'string' && !st.disposed) {
      let doc;
      try {
        doc = await api.get(`/experiments/${id}/trials?limit=${REST_PAGE}&cursor=${encodeURIComponent(st.cursor)}`);
        st.loadError = null;
        failures = 0;
      } catch (err) {
        if (st.disposed) return;
        st.loadError = err.message;
        renderLoadState();
        await new Promise((r) => setTimeout(r, Math.min(10000, 1000 * 2 ** failures++)));
        continue;
      }
      if (st.disposed) return;
      applyTrials((doc && doc.trials) || [], true);
      st.cursor = doc && typeof doc.next_cursor === 'string' ? doc.next_cursor : null;
      if (doc && Number.isFinite(doc.total)) st.listTotal = doc.total;
      const t0 = performance.now();
      updateColumns();
      renderHead();
      table.invalidate();
      table.render();
      renderLoadState();
      // The curves change only once their results are read (at the end):
      // no 100,000-trial ranking a page for them meanwhile.
      (window.__ctune.pageRenderMs = window.__ctune.pageRenderMs || []).push(performance.now() - t0);
      if (st.cursor === null || performance.now() - st.pcAt >= PC_LOADING_MS) {
        // Its own task: the table and the count paint first (100,000
        // lines take most of a second).
        await new Promise((r) => setTimeout(r, 0));
        if (st.disposed) return;
        st.trialsChanged = false;
        renderParcoords();
      }
      // Let input and painting in between two pages.
      await new Promise((r) => setTimeout(r, 0));
    }
    if (st.disposed) return;
    performance.mark('ctune:all-trials');
    window.__ctune.allTrialsAt = performance.now();
    // Better trials may have come with the later pages: their curves.
    await fetchCurves(curveIds());
    if (!st.disposed) renderCurves();
  }

  async function cancel() {
    const dlg = document.getElementById('confirm-dialog');
    document.getElementById('confirm-title').textContent = `Cancel ${st.exp.name}?`;
    document.getElementById('confirm-text').textContent =
      'No more trials will start, and running trials are told to stop. This cannot be undone.';
    const answer = await new Promise((resolve) => {
      dlg.addEventListener('close', () => resolve(dlg.returnValue), { once: true });
      dlg.returnValue = '';
      dlg.showModal();
      document.getElementById('confirm-no').focus();
    });
    if (answer !== 'yes') return;
    cancelBtn.disabled = true;
    try {
      await api.post(`/experiments/${id}/cancel`);
      msg.replaceChildren(note('Cancelled: no new trials will start.', 'ok'));
      await tick();
    } catch (e) {
      msg.replaceChildren(note(`Cancel failed: ${e.message}`, 'error'));
    } finally {
      cancelBtn.disabled = false;
    }
  }

  // After a control: draw the experiment the server answered, then catch up.
  async function refresh(e) {
    if (st.disposed) return;
    if (e && e.id === id && e.status) { st.exp = e; renderHead(); }
    try { await tick(); } catch (err) { ctx.lostLive(err); }
  }

  let p = null;
  async function tick() {
    const [e, tr, rs] = await Promise.all([
      api.get(`/experiments/${id}`),
      api.get(`/experiments/${id}/trials?since=${st.trialSeq}`),
      api.get(`/experiments/${id}/results?since=${st.resultSeq}&limit=${RESULTS_LIMIT}`),
    ]);
    if (st.disposed) return false;
    st.exp = e;
    applyTrials(tr.trials || []);
    if (Number.isFinite(tr.last_seq)) st.trialSeq = Math.max(st.trialSeq, tr.last_seq);
    const results = rs.results || [];
    let maxSeq = st.resultSeq;
    const wanted = curveIds();
    const missing = new Set();
    for (const r of results) {
      if (Number.isFinite(r.seq)) maxSeq = Math.max(maxSeq, r.seq);
      const pts = st.curves.get(r.trial_id);
      if (pts) addPoint(pts, r.result || {});
      else if (st.fetching.has(r.trial_id)) {
        if (!st.early.has(r.trial_id)) st.early.set(r.trial_id, []);
        st.early.get(r.trial_id).push(r.result || {});
      } else if (wanted.has(r.trial_id)) missing.add(r.trial_id);
    }
    const more = results.length >= RESULTS_LIMIT;
    st.resultSeq = more ? maxSeq : Math.max(maxSeq, Number.isFinite(rs.last_seq) ? rs.last_seq : 0);
    for (const tid of wanted) if (!st.curves.has(tid) && st.trials.get(tid)?.last_result) missing.add(tid);
    if (missing.size) await fetchCurves(missing);
    if (st.disposed) return false;
    const t0 = performance.now();
    render();
    // How long a live update holds the main thread (the scale test reads it).
    (window.__ctune.renderMs = window.__ctune.renderMs || []).push(performance.now() - t0);
    ctx.setLive('live · updated ' + new Date().toLocaleTimeString());
    if (p) p.setInterval(followsFast(e) ? 1000 : 5000);
    return more;
  }

  // The failure view, redrawn when the failed trials or the count change.
  function renderFailuresView() {
    const all = [...st.trials.values()];
    let nfail = 0, seqs = 0;
    for (const t of all) if (t.error_signature) { nfail++; seqs += t.updated_seq || 0; }
    failState.any = nfail > 0;
    const key = `${all.length}:${nfail}:${seqs}`;
    if (key === failState.key) return;
    failState.key = key;
    failSection.hidden = !renderFailures(failBox, all, st.hpList, failState);
  }

  function render() {
    renderFailuresView();
    updateColumns();
    renderHead();
    table.invalidate();
    table.render();
    renderLoadState();
    renderCurves();
    renderPareto();
    // Thousands of lines barely move with one more result: redraw them at
    // most every 5 s there (a later tick catches up, changed or not).
    if (st.trialsChanged && (st.trials.size <= 2000 || performance.now() - st.pcAt >= 5000)) {
      st.trialsChanged = false;
      renderParcoords();
    }
  }

  let resizeTimer = null;
  const ro = new ResizeObserver(() => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (st.exp && !st.disposed) renderParcoords(); }, 150);
  });

  (async () => {
    try {
      const chartPromise = loadChartJs();
      // The first page only: the rest comes in the background (loadRest).
      const [e, tr] = await Promise.all([api.get(`/experiments/${id}`),
        api.get(`/experiments/${id}/trials?limit=${FIRST_PAGE}`)]);
      if (st.disposed) return;
      performance.mark('ctune:trials-fetched');
      st.exp = e;
      applyTrials(tr.trials || [], true);
      // Changes after this page's snapshot come by ?since= (the server's
      // last_seq is its change counter then, past every trial listed).
      if (Number.isFinite(tr.last_seq)) st.trialSeq = Math.max(st.trialSeq, tr.last_seq);
      else for (const t of st.trials.values()) st.trialSeq = Math.max(st.trialSeq, t.updated_seq || 0);
      st.resultSeq = st.trialSeq;
      st.cursor = typeof tr.next_cursor === 'string' ? tr.next_cursor : null;
      st.listTotal = Number.isFinite(tr.total) ? tr.total : st.trials.size;
      renderFailuresView();
      updateColumns();
      renderHead();
      table.render();
      renderLoadState();
      renderParcoords();
      renderPareto();
      performance.mark('ctune:tables-drawn');
      ro.observe(pcCanvas);
      const Chart = await chartPromise;
      if (st.disposed) return;
      if (Chart) {
        st.chart = new CurveChart(Chart, curvesCanvas, {
          xLabel: timeAttr(), yLabel: e.metric,
          onPick: (tid) => { location.hash = `#/trials/${tid}`; },
        });
      } else {
        curvesBox.replaceWith(note(NO_CHART_NOTE, 'warn'));
      }
      performance.mark('ctune:chart-ready');
      await fetchCurves(curveIds());
      if (st.disposed) return;
      performance.mark('ctune:curves-fetched');
      renderCurves();
      ctx.setLive('live · updated ' + new Date().toLocaleTimeString());
      ctx.ready();
      p = poller(tick, followsFast(e) ? 1000 : 5000, ctx.lostLive);
      // The rest of the list only now: its 10,000-trial pages would hold a
      // connection (the browser has 6 a host) and the server while the
      // curves above load.
      loadRest().catch((err) => console.warn('ctune: trial list', err));
    } catch (err) {
      msg.replaceChildren(note(err.status === 404
        ? `There is no experiment ${id}.` : `Could not load experiment ${id}: ${err.message}`, 'error'));
      ctx.ready();
    }
  })();

  return () => {
    st.disposed = true;
    if (p) p.stop();
    ro.disconnect();
    clearTimeout(resizeTimer);
    if (st.chart) st.chart.destroy();
  };
}
