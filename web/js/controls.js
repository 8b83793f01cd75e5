// Experiment and trial controls (docs/protocol.md#experiment-control): pause / resume, extend, edit,
// delete (confirmed, force when trials run) and stop one trial. The server
// names the session's role on each reply (X-Ctune-Role): a viewer sees none
// of these buttons. Each control's error from the server shows next to it
// (a dialog's inside the dialog, by the field the server named).
import { api } from './api.js';
import { h } from './dom.js';

// A viewer session cannot change anything; null (not told) is a server
// without tokens, where everything is allowed.
export function canControl() {
  return api.role() !== 'viewer';
}

// A line the next page shows once (after a delete, on the experiments list).
let flash = null;
export function takeFlash() {
  const f = flash;
  flash = null;
  return f;
}

function showError(slot, e) {
  slot.textContent = e.message || String(e);
  slot.hidden = false;
  // Refused as a viewer: the other buttons go too (the message stays).
  if (e.status === 403 && e.code === 'forbidden') api.setRole('viewer');
}

function clearError(slot) {
  slot.textContent = '';
  slot.hidden = true;
}

const errorSlot = (id) => h('span', { class: 'ctl-error', id, role: 'alert', hidden: true });

// One button with its own error beside it; run() does the request.
function control(id, label, cls, run) {
  const err = errorSlot(id + '-error');
  const btn = h('button', { type: 'button', id, class: cls || null });
  btn.textContent = label;
  btn.addEventListener('click', async () => {
    clearError(err);
    btn.disabled = true;
    try {
      await run();
    } catch (e) {
      showError(err, e);
    } finally {
      btn.disabled = false;
    }
  });
  return { btn, err, el: h('span', { class: 'ctl' }, btn, err) };
}

function openDialog(dlg, focus) {
  document.body.append(dlg);
  dlg.showModal();
  if (focus) focus.focus();
}

// A modal form whose submit runs send(); it stays open with the server's
// error (by its field when the server named one) until the send succeeds.
function formDialog({ id, title, intro, fields, submit, cls, send, extra }) {
  const err = errorSlot(id + '-error');
  const fieldErr = new Map();
  const rows = fields.map((f) => {
    const fe = errorSlot(`${id}-${f.name}-error`);
    fieldErr.set(f.name, fe);
    return [h('label', { for: `${id}-${f.name}` }, f.label), f.input, f.help ? h('p', { class: 'muted small help' }, f.help) : null, fe];
  });
  const ok = h('button', { type: 'submit', class: cls || 'primary', id: id + '-ok' }, submit);
  const no = h('button', { type: 'button', id: id + '-no' }, 'Close');
  // novalidate: the server's rules and words decide (one source of truth).
  const form = h('form', { method: 'dialog', novalidate: true },
    h('h2', { id: id + '-title' }, title), intro ? h('p', { id: id + '-text' }, intro) : null,
    rows, extra || null, err, h('div', { class: 'actions' }, no, ok));
  const dlg = h('dialog', { id, 'aria-labelledby': id + '-title' }, form);
  no.addEventListener('click', () => dlg.close('no'));
  dlg.addEventListener('close', () => dlg.remove());
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearError(err);
    for (const fe of fieldErr.values()) clearError(fe);
    ok.disabled = true;
    try {
      await send();
      dlg.close('yes');
    } catch (e) {
      // "tags[1]" or "scheduler.max_t" is shown by the field it names.
      const path = String(e.path || '');
      const f = fields.find((x) => path === x.name || path.startsWith(x.name + '[') ||
        path.startsWith(x.name + '.') || (x.path && path === x.path));
      showError(f ? fieldErr.get(f.name) : err, e);
    } finally {
      ok.disabled = false;
    }
  });
  return dlg;
}

const num = (name, value, attrs) => h('input', Object.assign({ id: name, name, type: 'number', value: value ?? '' }, attrs || {}));

// Tags typed as "a, b c" -> ["a", "b", "c"]: commas or spaces separate them.
export function parseTags(text) {
  return String(text).split(/[\s,]+/).map((t) => t.trim()).filter(Boolean);
}

export function tagChips(tags, onPick) {
  return (tags || []).map((t) => (onPick
    ? h('button', { type: 'button', class: 'chip', title: `Only experiments tagged ${t}`, onclick: () => onPick(t) }, t)
    : h('span', { class: 'chip' }, t)));
}

function maxTOf(e) {
  const s = e.scheduler || (e.config && e.config.scheduler) || {};
  return s.max_t;
}

// The experiment page's buttons. refresh(exp?) redraws the page (with the
// experiment JSON the server answered, when there is one).
export class ExperimentControls {
  constructor(id, { refresh }) {
    this.id = id;
    this.exp = null;
    this.refresh = refresh;
    const path = `/experiments/${id}`;
    this.pause = control('pause-experiment', 'Pause', null, async () => {
      this.refresh(await api.post(path + '/pause'));
    });
    this.resume = control('resume-experiment', 'Resume', 'primary', async () => {
      this.refresh(await api.post(path + '/resume'));
    });
    this.extend = control('extend-experiment', 'Extend…', null, async () => this.openExtend());
    this.edit = control('edit-experiment', 'Edit…', null, async () => this.openEdit());
    this.del = control('delete-experiment', 'Delete…', 'danger', async () => this.openDelete());
    this.el = h('div', { class: 'controls', id: 'experiment-controls' },
      this.pause.el, this.resume.el, this.extend.el, this.edit.el, this.del.el);
  }

  update(exp) {
    this.exp = exp;
    const can = canControl();
    const live = exp.status === 'RUNNING' || exp.status === 'PAUSED';
    this.pause.btn.hidden = !can || exp.status !== 'RUNNING';
    this.resume.btn.hidden = !can || exp.status !== 'PAUSED';
    this.extend.btn.hidden = !can || exp.status === 'CANCELLED';
    this.edit.btn.hidden = !can;
    this.del.btn.hidden = !can;
    this.el.dataset.live = live ? 'yes' : 'no';
  }

  openExtend() {
    const e = this.exp;
    const cfg = e.config || {};
    const samples = cfg.num_samples ?? e.num_trials;
    const maxT = maxTOf(e);
    const nIn = num('extend-dialog-num_samples', '', { min: (samples || 0) + 1, step: 1, placeholder: `now ${samples}` });
    const fields = [{ name: 'num_samples', label: 'Samples (more trials)', input: nIn,
      help: `Now ${samples}. Only up: new trials are sampled and run.` }];
    let tIn = null;
    if (maxT !== undefined && maxT !== null) {
      tIn = num('extend-dialog-max_t', '', { min: maxT, step: 'any', placeholder: `now ${maxT}` });
      fields.push({ name: 'max_t', path: 'scheduler.max_t', label: 'Longest run (scheduler max_t)', input: tIn,
        help: `Now ${maxT}. Only up: trials that a higher max_t would continue resume from their checkpoints.` });
    }
    const dlg = formDialog({
      id: 'extend-dialog', title: `Extend ${e.name}`, submit: 'Extend', fields,
      intro: 'A finished experiment that gains trials or max_t runs again.',
      send: async () => {
        const body = {};
        if (nIn.value !== '') body.num_samples = Number(nIn.value);
        if (tIn && tIn.value !== '') body.scheduler = { max_t: Number(tIn.value) };
        if (!Object.keys(body).length) throw Object.assign(new Error('Nothing to change: enter more samples or a higher max_t.'), {});
        this.refresh(await api.patch(`/experiments/${this.id}`, body));
      },
    });
    openDialog(dlg, nIn);
  }

  openEdit() {
    const e = this.exp;
    const cfg = e.config || {};
    const mc = e.max_concurrent_trials ?? cfg.max_concurrent_trials ?? '';
    const pr = e.priority ?? 1;
    const mcIn = num('edit-dialog-max_concurrent_trials', mc, { min: 0, step: 1 });
    const prIn = num('edit-dialog-priority', pr, { min: 0, step: 'any' });
    const notesIn = h('textarea', { id: 'edit-dialog-notes', name: 'notes', rows: 4, maxlength: 4096 });
    notesIn.value = e.notes || '';
    const tagsIn = h('input', { id: 'edit-dialog-tags', name: 'tags', type: 'text', value: (e.tags || []).join(', '),
      placeholder: 'baseline, lr-sweep' });
    const dlg = formDialog({
      id: 'edit-dialog', title: `Edit ${e.name}`, submit: 'Save',
      fields: [
        { name: 'max_concurrent_trials', label: 'Trials at once (max concurrent)', input: mcIn, help: 'Empty or 0: no limit beyond the workers.' },
        { name: 'priority', label: 'Priority', input: prIn, help: 'Share of the workers against other running experiments (default 1).' },
        { name: 'notes', label: 'Notes', input: notesIn },
        { name: 'tags', label: 'Tags', input: tagsIn, help: 'Separated by commas or spaces.' },
      ],
      send: async () => {
        // Only what changed: an untouched field keeps the server's value.
        const body = {};
        if (mcIn.value !== String(mc)) body.max_concurrent_trials = mcIn.value === '' ? 0 : Number(mcIn.value);
        if (prIn.value !== String(pr)) body.priority = Number(prIn.value);
        if (notesIn.value !== (e.notes || '')) body.notes = notesIn.value;
        const tags = parseTags(tagsIn.value);
        if (tags.join('\u0000') !== (e.tags || []).join('\u0000')) body.tags = tags;
        if (Object.keys(body).length) this.refresh(await api.patch(`/experiments/${this.id}`, body));
      },
    });
    openDialog(dlg, mcIn);
  }

  openDelete() {
    const e = this.exp;
    const c = e.counts || {};
    const running = c.RUNNING || 0;
    const n = e.num_created ?? e.num_trials ?? 0;
    const force = h('input', { type: 'checkbox', id: 'delete-dialog-force', name: 'force' });
    const forceRow = h('p', { class: 'force', hidden: running === 0 }, h('label', { class: 'inline', for: 'delete-dialog-force' }, force,
      ` Stop its ${running || 'running'} running trial${running === 1 ? '' : 's'} first (force)`));
    const dlg = formDialog({
      id: 'delete-dialog', title: `Delete ${e.name}?`, submit: `Delete ${e.name}`, cls: 'danger', fields: [],
      intro: `This removes experiment ${e.name} (id ${e.id}) with its ${n} trial${n === 1 ? '' : 's'}, their results, ` +
        'checkpoints and logs. This cannot be undone.',
      extra: forceRow,
      send: async () => {
        try {
          await api.del(`/experiments/${this.id}${force.checked ? '?force=1' : ''}`);
        } catch (err) {
          // 409 running: trials started since; offer the force option.
          if (err.status === 409) forceRow.hidden = false;
          throw err;
        }
        flash = `Deleted ${e.name}.`;
        location.hash = '#/';
      },
    });
    openDialog(dlg, dlg.querySelector('#delete-dialog-no'));
  }
}

// Trials a user may stop: live ones (the server ends them TERMINATED with
// their results and checkpoint kept).
export const STOPPABLE = new Set(['RUNNING', 'PAUSED', 'PENDING']);

// Errors of trial Stop buttons by trial id: the trial table redraws its rows
// at every update, and the error must stay by its row.
const stopErrors = new Map();

// A Stop button (and its error) for one trial; done(trial) after the server answered.
export function stopControl(t, done, opts) {
  if (!canControl() || !(opts && opts.statuses ? opts.statuses : STOPPABLE).has(t.status)) {
    const e = stopErrors.get(t.id);
    return e ? h('span', { class: 'ctl-error', role: 'alert' }, e) : null;
  }
  const idAttr = opts && opts.id;
  const err = h('span', { class: 'ctl-error', role: 'alert', id: idAttr ? idAttr + '-error' : null,
    hidden: !stopErrors.has(t.id) }, stopErrors.get(t.id) || '');
  const btn = h('button', { type: 'button', class: 'danger small stop-trial', id: idAttr || null,
    dataset: { trial: t.id }, title: `Stop ${t.name || 'trial ' + t.id}: it keeps its results and checkpoint` }, 'Stop');
  btn.addEventListener('click', async () => {
    stopErrors.delete(t.id);
    clearError(err);
    btn.disabled = true;
    try {
      done(await api.post(`/trials/${t.id}/stop`));
    } catch (e) {
      stopErrors.set(t.id, e.message);
      showError(err, e);
      btn.disabled = false;
    }
  });
  return h('span', { class: 'ctl' }, btn, err);
}
