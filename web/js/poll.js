// A polling loop that never overlaps itself and stops for good on dispose.
// onError(e) hears each failed tick (the loop keeps going: the server may be
// restarting); the next good tick is the caller's to announce.
export function poller(tick, intervalMs, onError) {
  let stopped = false;
  let timer = null;
  let interval = intervalMs;
  const run = async () => {
    if (stopped) return;
    let again = false;
    // A hidden tab asks nothing; it catches up (through ?since=) when shown.
    if (document.hidden) {
      timer = setTimeout(run, interval);
      return;
    }
    try {
      again = await tick();
    } catch (e) {
      console.warn('ctune: poll failed', e);
      if (onError) onError(e);
    }
    if (!stopped) timer = setTimeout(run, again === true ? 0 : interval);
  };
  timer = setTimeout(run, interval);
  return {
    setInterval(ms) { interval = ms; },
    stop() { stopped = true; clearTimeout(timer); },
  };
}
