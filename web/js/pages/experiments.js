// The experiments list: name (and notes), tags, status, progress, best metric,
// started, duration; a search box over name, notes and tags (?q=, ?tag=).
import { api } from '../api.js';
import { h, note, expStatusBadge, allTrialsFailed } from '../dom.js';
import { fmtNum, fmtTime, fmtDuration } from '../format.js';
import { poller } from '../poll.js';
import { getAll } from '../lists.js';
import { tagChips, takeFlash } from '../controls.js';

export const NAME = 'experiments';

function doneCount(e) {
  const c = e.counts || {};
  return (c.TERMINATED || 0) + (c.ERROR || 0);
}

function row(e, onTag) {
  const total = e.num_trials || 0;
  const done = doneCount(e);
  const pct = total ? Math.round((100 * done) / total) : 0;
  const end = e.ended_at || (e.status === 'RUNNING' ? Date.now() / 1000 : null);
  return h('tr', { dataset: { id: e.id } },
    h('th', { scope: 'row' }, h('a', { href: `#/experiments/${e.id}` }, e.name || `experiment ${e.id}`),
      e.notes ? h('div', { class: 'exp-notes-cell muted small', title: e.notes }, e.notes) : null),
    h('td', null, expStatusBadge(e)),
    h('td', { class: 'progress-cell' },
      h('progress', { max: total || 1, value: done, 'aria-label': `${done} of ${total} trials done` }),
      h('span', null, ` ${done} / ${total}`), h('span', { class: 'muted' }, ` (${pct}%)`)),
    // An all-ERROR experiment has no best: its "best" value is a failed trial's.
    h('td', { class: 'num' }, e.best && !allTrialsFailed(e) ? fmtNum(e.best.value) : '—',
      h('span', { class: 'muted' }, ` ${e.metric || ''} ${e.mode ? '(' + e.mode + ')' : ''}`)),
    h('td', null, fmtTime(e.created_at)),
    h('td', null, end ? fmtDuration(end - e.created_at) : '—'),
    h('td', { class: 'tags-cell' }, tagChips(e.tags, onTag)));
}

export function mount(main, _params, ctx) {
  document.title = 'Experiments · ctune';
  const tbody = h('tbody');
  const table = h('table', { class: 'data', id: 'experiments-table' },
    h('caption', { class: 'sr-only' }, 'Experiments, newest first'),
    h('thead', null, h('tr', null, ['Name', 'Status', 'Progress', 'Best', 'Started', 'Duration', 'Tags']
      .map((t) => h('th', { scope: 'col', class: t === 'Best' ? 'num' : null }, t)))),
    tbody);
  const msg = h('div');
  const flash = takeFlash();
  // Search: the server matches q against name, notes and tags, and
  // tag exactly; typing waits a moment before asking.
  const qIn = h('input', { type: 'search', id: 'experiments-q', name: 'q', placeholder: 'name, notes or tag',
    autocomplete: 'off' });
  const tagIn = h('input', { type: 'search', id: 'experiments-tag', name: 'tag', placeholder: 'tag', autocomplete: 'off',
    class: 'short' });
  let typing = null;
  const search = () => { clearTimeout(typing); typing = setTimeout(load, 250); };
  qIn.addEventListener('input', search);
  tagIn.addEventListener('input', search);
  const form = h('form', { class: 'table-tools', role: 'search', id: 'experiments-search',
    onsubmit: (ev) => { ev.preventDefault(); clearTimeout(typing); load(); } },
  h('label', { for: 'experiments-q' }, 'Search'), qIn, h('label', { for: 'experiments-tag' }, 'Tag'), tagIn,
  h('button', { type: 'button', id: 'experiments-clear',
    onclick: () => { qIn.value = ''; tagIn.value = ''; clearTimeout(typing); load(); } }, 'Clear'));
  const onTag = (t) => { tagIn.value = t; clearTimeout(typing); load(); };
  // Element.append writes a null as the text "null": leave the flash out instead.
  main.append(h('h1', null, 'Experiments'), ...(flash ? [note(flash, 'ok')] : []), msg,
    h('section', { class: 'card', 'aria-label': 'Experiments' }, form, h('div', { class: 'scroll' }, table)));

  let firstLoad = true;
  let asked = 0; // answers to an older search are dropped
  const load = async () => {
    const n = ++asked;
    try {
      const q = new URLSearchParams();
      if (qIn.value.trim()) q.set('q', qIn.value.trim());
      if (tagIn.value.trim()) q.set('tag', tagIn.value.trim());
      const filtered = [...q.keys()].length > 0;
      const data = await getAll('/experiments' + (filtered ? '?' + q : ''), 'experiments');
      if (n !== asked) return;
      const list = (data.experiments || []).slice().sort((a, b) => b.id - a.id);
      tbody.replaceChildren(...list.map((e) => row(e, onTag)));
      msg.replaceChildren(list.length ? '' : note(filtered ? 'No experiment matches this search.'
        : 'No experiments yet. Submit one with `ctune submit experiment.json` or POST /api/v1/experiments.'));
      ctx.setLive('updated ' + new Date().toLocaleTimeString());
    } catch (e) {
      ctx.lostLive(e);
      msg.replaceChildren(note(`Could not load the experiments: ${e.message}`, 'error'));
    }
    if (firstLoad) { firstLoad = false; ctx.ready(); }
  };
  load();
  const p = poller(load, 2000, ctx.lostLive);
  return () => { p.stop(); clearTimeout(typing); };
}
