// Workers: resources, free resources, running trials and the last heartbeat.
import { api } from '../api.js';
import { h, note, statusBadge } from '../dom.js';
import { ago } from '../format.js';
import { poller } from '../poll.js';
import { getAll } from '../lists.js';

export const NAME = 'workers';

function res(r) {
  if (!r) return '—';
  const parts = [`${r.cpu ?? 0} cpu`, `${r.gpu ?? 0} gpu`];
  if (r.memory_mb) parts.push(`${(r.memory_mb / 1024).toFixed(1)} GiB`);
  return parts.join(' · ');
}

function row(w) {
  const running = w.running_trials || [];
  return h('tr', { dataset: { id: w.id } },
    h('th', { scope: 'row' }, w.name || `worker ${w.id}`, h('span', { class: 'muted' }, ` #${w.id}`)),
    h('td', null, statusBadge(w.status || 'alive')),
    h('td', null, res(w.resources)),
    h('td', null, res(w.free)),
    h('td', null, running.length
      ? running.map((id, i) => [i ? ', ' : '', h('a', { href: `#/trials/${id}` }, `trial ${id}`)])
      : h('span', { class: 'muted' }, 'none')),
    h('td', null, ago(w.last_heartbeat)));
}

export function mount(main, _params, ctx) {
  document.title = 'Workers · ctune';
  const tbody = h('tbody');
  const msg = h('div');
  main.append(h('h1', null, 'Workers'), msg,
    h('section', { class: 'card', 'aria-label': 'Workers' }, h('div', { class: 'scroll' },
      h('table', { class: 'data', id: 'workers-table' },
        h('caption', { class: 'sr-only' }, 'Registered workers'),
        h('thead', null, h('tr', null, ['Worker', 'Status', 'Resources', 'Free', 'Running trials', 'Last heartbeat']
          .map((t) => h('th', { scope: 'col' }, t)))),
        tbody))));
  let firstLoad = true;
  const load = async () => {
    try {
      const data = await getAll('/workers', 'workers');
      const list = data.workers || [];
      tbody.replaceChildren(...list.map(row));
      msg.replaceChildren(list.length ? '' : note('No workers have registered. Start one with `ctune-worker --server URL`.'));
      ctx.setLive('updated ' + new Date().toLocaleTimeString());
    } catch (e) {
      ctx.lostLive(e);
      msg.replaceChildren(note(`Could not load the workers: ${e.message}`, 'error'));
    }
    if (firstLoad) { firstLoad = false; ctx.ready(); }
  };
  load();
  const p = poller(load, 2000, ctx.lostLive);
  return () => p.stop();
}
