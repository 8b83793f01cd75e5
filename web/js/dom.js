// Tiny DOM helpers: element creation without innerHTML (no injection from data).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    // An object, set through the CSSOM: the CSP (style-src 'self') refuses
    // a style attribute, not el.style's properties.
    else if (k === 'style') Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// why (a pending trial's reason) becomes the badge's tooltip.
export function statusBadge(status, why) {
  return h('span', { class: 'badge s-' + String(status).toLowerCase(), title: why || null }, status);
}

// Outcome constraints: a trial whose last result violates one (feasible
// false) gets this tag; it is never the best nor on the Pareto front.
export function infeasibleTag(t) {
  if (!t || t.feasible !== false) return null;
  const why = typeof t.violation === 'number'
    ? `violates the experiment's constraints (total violation ${t.violation})`
    : 'a constrained metric is missing or not a number';
  return h('span', { class: 'tag infeasible', title: why }, 'infeasible');
}

// An experiment that ended TERMINATED with every trial in ERROR (at least
// one) failed, as Ray's tune.run raises: `ctune run` exits 6 and shows FAILED.
export function allTrialsFailed(e) {
  const c = (e && e.counts) || {};
  if (!e || e.status !== 'TERMINATED' || !(c.ERROR > 0)) return false;
  return Object.entries(c).every(([k, v]) => k === 'ERROR' || !v);
}

// The experiment's badge: its status, or FAILED (red) for an all-ERROR end.
export function expStatusBadge(e) {
  if (allTrialsFailed(e)) {
    return h('span', { class: 'badge s-failed', title: `every one of its ${e.counts.ERROR} trials ended in ERROR` },
      'FAILED');
  }
  return statusBadge(e.status);
}

export function note(text, kind) {
  return h('p', { class: 'note ' + (kind || ''), role: kind === 'error' ? 'alert' : null }, text);
}

export function section(title, id, ...body) {
  return h('section', { class: 'card', 'aria-labelledby': id },
    h('h2', { id }, title), ...body);
}
