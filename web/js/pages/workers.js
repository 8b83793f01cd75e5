// Workers: resources, free resources, running trials, the last heartbeat, and
// for a quarantined worker why, with the admin's button that releases it.
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

// docs/server.md#quarantine: why it gets no lease, and (admin) the release.
function quarantineCell(w, reload, msg) {
  if (w.status !== 'quarantined') return null;
  const btn = h('button', { type: 'button', class: 'release-quarantine', dataset: { id: w.id } },
    'Release');
  btn.hidden = api.role() === 'viewer';
  btn.addEventListener('click', async () => {
    btn.disabled = true;
    try {
      await api.post(`/workers/${w.id}/release-quarantine`);
      msg.replaceChildren(note(`Worker ${w.id} released: it gets leases again.`));
      await reload();
    } catch (e) {
      msg.replaceChildren(note(`Could not release worker ${w.id}: ${e.message}`, 'error'));
      btn.disabled = false;
    }
  });
  return h('div', { class: 'quarantine' },
    h('span', { class: 'quarantine-reason' }, w.quarantine_reason || 'quarantined'), ' ', btn);
}

function row(w, reload, msg) {
  const running = w.running_trials || [];
  return h('tr', { dataset: { id: w.id } },
    h('th', { scope: 'row' }, w.name || `worker ${w.id}`, h('span', { class: 'muted' }, ` #${w.id}`)),
    h('td', null, statusBadge(w.status || 'alive'), quarantineCell(w, reload, msg)),
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
      tbody.replaceChildren(...list.map((w) => row(w, load, msg)));
      if (!list.length) msg.replaceChildren(note('No workers have registered. Start one with `ctune-worker --server URL`.'));
      else if (msg.querySelector('.error')) msg.replaceChildren();
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
