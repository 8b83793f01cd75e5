// Formatting of numbers, times and durations for tables and cards; pure functions.
export function fmtNum(v) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'boolean') return String(v);
  if (typeof v !== 'number') return String(v);
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

export function fmtValue(v) {
  if (v !== null && typeof v === 'object') return JSON.stringify(v);
  return fmtNum(v);
}

export function fmtTime(unix) {
  if (!unix) return '—';
  const d = new Date(unix * 1000);
  const now = new Date();
  const sameDay = d.toDateString() === now.toDateString();
  return sameDay ? d.toLocaleTimeString() : d.toLocaleString();
}

export function fmtDuration(s) {
  if (s === null || s === undefined || !Number.isFinite(s) || s < 0) return '—';
  if (s < 60) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${m % 60} min`;
}

export function ago(unix) {
  if (!unix) return '—';
  return fmtDuration(Date.now() / 1000 - unix) + ' ago';
}

// Smaller is better for mode "min": a comparator that puts the best first and
// missing or non-finite values last.
export function bestFirst(mode) {
  const sign = mode === 'max' ? -1 : 1;
  return (a, b) => {
    const fa = Number.isFinite(a), fb = Number.isFinite(b);
    if (!fa || !fb) return fa ? -1 : fb ? 1 : 0;
    return sign * (a - b);
  };
}
