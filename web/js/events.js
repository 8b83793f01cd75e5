// The change feed (GET /api/v1/events, Server-Sent Events): one EventSource
// for the page, shared by every poller (poll.js). An event makes the pollers
// fetch now instead of at their next tick; while the stream is open they
// fall back to a slow safety poll. EventSource reconnects by itself and sends
// Last-Event-ID, so nothing is missed across a reconnect; a "reset" (the
// server no longer has our position) just makes everyone re-fetch. Where
// EventSource is missing or refused (a bearer token only JS knows: it cannot
// send headers), nothing changes: the pollers keep their interval.
const KINDS = ['experiment', 'trial', 'result', 'worker', 'reset'];
const listeners = new Set();
let source = null;
let open = false;
let failed = false;

function connect() {
  if (source || failed || typeof EventSource === 'undefined') return;
  try {
    source = new EventSource('/api/v1/events');
  } catch (e) {
    failed = true;
    return;
  }
  source.onopen = () => { open = true; };
  source.onerror = () => {
    open = false;
    // CLOSED: refused for good (401, not text/event-stream); CONNECTING: it retries.
    if (source && source.readyState === 2) {
      source.close();
      source = null;
      failed = true;
    }
  };
  for (const kind of KINDS) {
    source.addEventListener(kind, (ev) => {
      for (const fn of listeners) {
        try { fn(kind, ev); } catch (e) { console.warn('ctune: event listener', e); }
      }
    });
  }
}

// Leaving the page closes the stream: a page kept in the back/forward cache
// would otherwise keep its connection, and the browser allows only 6 to a
// server (a few visits on, the next page's requests queued behind them for
// a minute). Coming back from that cache opens it again and makes everyone
// re-fetch (the changes in between were not streamed).
addEventListener('pagehide', () => {
  if (source) source.close();
  source = null;
  open = false;
});
addEventListener('pageshow', (ev) => {
  if (!ev.persisted || !listeners.size) return;
  connect();
  for (const fn of listeners) {
    try { fn('reset', null); } catch (e) { console.warn('ctune: event listener', e); }
  }
});

// fn(kind, event) on every change; returns the unsubscribe function.
export function onChange(fn) {
  listeners.add(fn);
  connect();
  return () => { listeners.delete(fn); };
}

// Whether the stream is open now (the pollers may slow down).
export function streaming() { return open; }
