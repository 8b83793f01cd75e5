// The experiments list: name, status, progress, best metric, started, duration.
import { api } from '../api.js';
import { h, note, statusBadge } from '../dom.js';
import { fmtNum, fmtTime, fmtDuration } from '../format.js';
import { poller } from '../poll.js';

export const NAME = 'experiments';

function doneCount(e) {
  const c = e.counts || {};
  return (c.TERMINATED || 0) + (c.ERROR || 0);
}

function row(e) {
  const total = e.num_trials || 0;
  const done = doneCount(e);
  const pct = total ? Math.round((100 * done) / total) : 0;
  const end = e.ended_at || (e.status === 'RUNNING' ? Date.now() / 1000 : null);
  return h('tr', { dataset: { id: e.id } },
    h('th', { scope: 'row' }, h('a', { href: `#/experiments/${e.id}` }, e.name || `experiment ${e.id}`)),
    h('td', null, statusBadge(e.status)),
    h('td', { class: 'progress-cell' },
      h('progress', { max: total || 1, value: done, 'aria-label': `${done} of ${total} trials done` }),
      h('span', null, ` ${done} / ${total}`), h('span', { class: 'muted' }, ` (${pct}%)`)),
    h('td', { class: 'num' }, e.best ? fmtNum(e.best.value) : '—',
      h('span', { class: 'muted' }, ` ${e.metric || ''} ${e.mode ? '(' + e.mode + ')' : ''}`)),
    h('td', null, fmtTime(e.created_at)),
    h('td', null, end ? fmtDuration(end - e.created_at) : '—'));
}

export function mount(main, _params, ctx) {
  document.title = 'Experiments · ctune';
  const tbody = h('tbody');
  const table = h('table', { class: 'data', id: 'experiments-table' },
    h('caption', { class: 'sr-only' }, 'Experiments, newest first'),
    h('thead', null, h('tr', null, ['Name', 'Status', 'Progress', 'Best', 'Started', 'Duration']
      .map((t) => h('th', { scope: 'col', class: t === 'Best' ? 'num' : null }, t)))),
    tbody);
  const msg = h('div');
  main.append(h('h1', null, 'Experiments'), msg,
    h('section', { class: 'card', 'aria-label': 'Experiments' }, h('div', { class: 'scroll' }, table)));

  let firstLoad = true;
  const load = async () => {
    try {
      const data = await api.get('/experiments');
      const list = (data.experiments || []).slice().sort((a, b) => b.id - a.id);
      tbody.replaceChildren(...list.map(row));
      msg.replaceChildren(list.length ? '' : note(
        'No experiments yet. Submit one with `ctune submit experiment.json` or POST /api/v1/experiments.'));
      ctx.setLive('updated ' + new Date().toLocaleTimeString());
    } catch (e) {
      ctx.lostLive(e);
      msg.replaceChildren(note(`Could not load the experiments: ${e.message}`, 'error'));
    }
    if (firstLoad) { firstLoad = false; ctx.ready(); }
  };
  load();
  const p = poller(load, 2000, ctx.lostLive);
  return () => p.stop();
}
