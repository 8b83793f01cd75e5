// A polling loop that never overlaps itself and stops for good on dispose.
// onError(e) hears each failed tick (the loop keeps going: the server may be
// restarting); the next good tick is the caller's to announce.
//
// With the event stream open (events.js) a change runs the tick
// at once (no more often than intervalMs) and quiet times only get a slow
// safety tick; without it, the loop polls every intervalMs as before.
import { onChange, streaming } from './events.js';

const SAFETY_MS = 5000;

export function poller(tick, intervalMs, onError) {
  let stopped = false;
  let timer = null;
  let interval = intervalMs;
  let running = false;
  let pending = false; // a change arrived while a tick ran
  let lastRun = 0;
  const schedule = (ms) => {
    clearTimeout(timer);
    timer = setTimeout(run, ms);
  };
  const run = async () => {
    if (stopped) return;
    let again = false;
    // A hidden tab asks nothing; it catches up (through ?since=) when shown.
    if (document.hidden) {
      schedule(interval);
      return;
    }
    running = true;
    pending = false;
    lastRun = Date.now();
    try {
      again = await tick();
    } catch (e) {
      console.warn('ctune: poll failed', e);
      if (onError) onError(e);
    }
    running = false;
    if (stopped) return;
    if (again === true) schedule(0);
    else if (pending) schedule(Math.max(0, lastRun + interval - Date.now()));
    else schedule(streaming() ? Math.max(interval, SAFETY_MS) : interval);
  };
  const unsubscribe = onChange(() => {
    if (stopped) return;
    if (running) {
      pending = true;
      return;
    }
    schedule(Math.max(0, lastRun + interval - Date.now()));
  });
  timer = setTimeout(run, interval);
  return {
    setInterval(ms) { interval = ms; },
    stop() { stopped = true; clearTimeout(timer); unsubscribe(); },
  };
}
