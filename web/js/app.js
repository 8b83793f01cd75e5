// The hash router: #/ experiments, #/experiments/ID, #/trials/ID, #/workers.
// Each page's mount() returns a dispose function that stops its polling.
import { h, note } from './dom.js';
import * as experiments from './pages/experiments.js';
import * as experiment from './pages/experiment.js';
import * as trial from './pages/trial.js';
import * as workers from './pages/workers.js';

const routes = [
  [/^#?\/?$/, experiments, 'experiments'],
  [/^#\/experiments\/?$/, experiments, 'experiments'],
  [/^#\/experiments\/(\d+)\/?$/, experiment, 'experiments'],
  [/^#\/trials\/(\d+)\/?$/, trial, 'experiments'],
  [/^#\/workers\/?$/, workers, 'workers'],
];

// Test hooks: how often the document loaded (a reload resets it) and when the
// current page finished its first render.
window.__ctune = { loads: (window.__ctune?.loads || 0) + 1, readyAt: null, page: null };

let dispose = null;
let first = true;

function setLive(text, lost) {
  const el = document.getElementById('live');
  el.textContent = text;
  el.classList.toggle('lost', Boolean(lost));
}

function lostLive(e) {
  setLive(`connection lost (${e.message}); retrying`, true);
}

async function navigate() {
  if (dispose) { dispose(); dispose = null; }
  window.__ctune.readyAt = null;
  const main = document.getElementById('main');
  main.replaceChildren();
  document.getElementById('notes').replaceChildren();
  const hash = location.hash || '#/';
  const hit = routes.find(([re]) => re.test(hash));
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (hit && a.dataset.nav === hit[2]) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!first) main.focus({ preventScroll: true });
  first = false;
  window.scrollTo(0, 0);
  if (!hit) {
    document.title = 'Not found · ctune';
    main.append(h('h1', null, 'Page not found'),
      note(`There is no page at ${hash}.`, 'error'), h('p', null, h('a', { href: '#/' }, 'All experiments')));
    return;
  }
  const [re, page] = hit;
  const params = hash.match(re).slice(1);
  window.__ctune.page = hit[2] === 'workers' ? 'workers' : page.NAME;
  dispose = page.mount(main, params, {
    setLive,
    lostLive,
    ready: () => { window.__ctune.readyAt = performance.now(); document.body.dataset.ready = page.NAME; },
  });
}

// The skip link must not change the hash: that would route to a missing page.
document.getElementById('skip-link').addEventListener('click', (e) => {
  e.preventDefault();
  document.getElementById('main').focus();
});

window.addEventListener('hashchange', navigate);
navigate();
