// A sortable, status- (and attribution-) filterable, paged table: only the visible page is in the
// DOM, so 10,000 rows cost one sort, not 10,000 <tr>s.
import { h } from './dom.js';
import { fmtValue } from './format.js';

function cmp(a, b) {
  const na = a === null || a === undefined || (typeof a === 'number' && !Number.isFinite(a));
  const nb = b === null || b === undefined || (typeof b === 'number' && !Number.isFinite(b));
  if (na || nb) return na && nb ? 0 : na ? 1 : -1; // missing values last either way
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

// columns: [{key, label, get(row), render?(row) -> Node, numeric, group}]
export class PagedTable {
  constructor({ caption, columns, pageSize = 50, statuses, attributions, idPrefix = 't' }) {
    this.columns = columns;
    this.pageSize = pageSize;
    this.page = 0;
    this.sortKey = null;
    this.sortDir = 1;
    this.status = '';
    this.attribution = '';
    this.rows = [];
    this.view = [];
    this.dirty = true;
    this.idPrefix = idPrefix;

    const statusSel = h('select', { id: idPrefix + '-status', onchange: (e) => {
      this.status = e.target.value; this.page = 0; this.dirty = true; this.render();
    } }, h('option', { value: '' }, 'all'), (statuses || []).map((s) => h('option', { value: s }, s)));
    const attrSel = h('select', { id: idPrefix + '-attribution', onchange: (e) => {
      this.attribution = e.target.value; this.page = 0; this.dirty = true; this.render();
    } }, h('option', { value: '' }, 'all'), (attributions || []).map((s) => h('option', { value: s }, s)));
    const sizeSel = h('select', { id: idPrefix + '-size', onchange: (e) => {
      this.pageSize = Number(e.target.value); this.page = 0; this.render();
    } }, [25, 50, 100, 250].map((n) => h('option', { value: n, selected: n === pageSize }, n)));
    this.info = h('span', { class: 'muted', 'aria-live': 'polite' });
    // While the rows are still arriving (a long list loads page by page):
    // says that a sort or filter covers only the rows loaded so far.
    this.scope = h('span', { class: 'partial', id: idPrefix + '-scope', hidden: true });
    this.prev = h('button', { type: 'button', onclick: () => { this.page--; this.render(); } }, '‹ Previous');
    this.next = h('button', { type: 'button', onclick: () => { this.page++; this.render(); } }, 'Next ›');
    this.tools = h('div', { class: 'table-tools' },
      statuses ? [h('label', { for: idPrefix + '-status' }, 'Status'), statusSel] : null,
      attributions ? [h('label', { for: idPrefix + '-attribution' }, 'Failure'), attrSel] : null,
      h('label', { for: idPrefix + '-size' }, 'Rows per page'), sizeSel,
      h('span', { class: 'spacer' }), this.info, this.scope, this.prev, this.next);
    this.thead = h('thead');
    this.tbody = h('tbody');
    this.table = h('table', { class: 'data', id: idPrefix + '-table' },
      h('caption', { class: 'sr-only' }, caption), this.thead, this.tbody);
    this.el = h('div', { class: 'table-block' }, this.tools, h('div', { class: 'scroll' }, this.table));
    this.renderHead();
  }

  setColumns(columns) {
    this.columns = columns;
    this.renderHead();
    this.dirty = true;
  }

  setRows(rows) {
    this.rows = rows;
    this.dirty = true;
  }

  // text: why the rows are not all there yet ('' once they are).
  setScope(text) {
    this.scope.textContent = text;
    this.scope.hidden = !text;
  }

  invalidate() {
    this.dirty = true;
  }

  sortBy(key) {
    if (this.sortKey === key) this.sortDir = -this.sortDir;
    else { this.sortKey = key; this.sortDir = 1; }
    this.page = 0;
    this.dirty = true;
    this.renderHead();
    this.render();
    const btn = this.thead.querySelector(`button[data-key="${CSS.escape(key)}"]`);
    if (btn) btn.focus();
  }

  renderHead() {
    const groups = [];
    for (const c of this.columns) {
      const g = groups[groups.length - 1];
      if (g && g.name === (c.group || '')) g.n++;
      else groups.push({ name: c.group || '', n: 1 });
    }
    const rows = [];
    if (groups.some((g) => g.name)) {
      rows.push(h('tr', { class: 'groups' }, groups.map((g) =>
        h('th', { scope: 'colgroup', colspan: g.n }, g.name))));
    }
    rows.push(h('tr', null, this.columns.map((c) => {
      const active = this.sortKey === c.key;
      const sort = active ? (this.sortDir > 0 ? 'ascending' : 'descending') : null;
      return h('th', { scope: 'col', 'aria-sort': sort, class: c.numeric ? 'num' : null },
        h('button', { type: 'button', class: 'sort', dataset: { key: c.key },
          onclick: () => this.sortBy(c.key),
          title: `Sort by ${c.label}` },
        c.label, h('span', { class: 'arrow', 'aria-hidden': 'true' },
          active ? (this.sortDir > 0 ? ' ▲' : ' ▼') : '')));
    })));
    this.thead.replaceChildren(...rows);
  }

  computeView() {
    let v = this.status ? this.rows.filter((r) => r.status === this.status) : this.rows.slice();
    if (this.attribution) v = v.filter((r) => r.attribution === this.attribution);
    const col = this.columns.find((c) => c.key === this.sortKey);
    if (col) {
      const keyed = v.map((r) => [col.get(r), r]);
      const d = this.sortDir;
      keyed.sort((a, b) => {
        const c = cmp(a[0], b[0]);
        // Missing values stay last in both directions.
        const missA = a[0] === null || a[0] === undefined, missB = b[0] === null || b[0] === undefined;
        return missA || missB ? c : d * c;
      });
      v = keyed.map((k) => k[1]);
    }
    this.view = v;
    this.dirty = false;
  }

  render() {
    if (this.dirty) this.computeView();
    const pages = Math.max(1, Math.ceil(this.view.length / this.pageSize));
    this.page = Math.min(Math.max(0, this.page), pages - 1);
    const start = this.page * this.pageSize;
    const slice = this.view.slice(start, start + this.pageSize);
    const trs = slice.map((r) => h('tr', { dataset: { id: r.id } }, this.columns.map((c, i) => {
      const content = c.render ? c.render(r) : fmtValue(c.get(r));
      return i === 0
        ? h('th', { scope: 'row' }, content)
        : h('td', { class: c.numeric ? 'num' : null }, content);
    })));
    if (!trs.length) {
      trs.push(h('tr', null, h('td', { colspan: this.columns.length, class: 'muted' },
        this.rows.length ? 'No trials with this status or failure.' : 'No rows yet.')));
    }
    this.tbody.replaceChildren(...trs);
    this.info.textContent = this.view.length
      ? `${start + 1}–${start + slice.length} of ${this.view.length.toLocaleString()}`
      : '0 rows';
    this.prev.disabled = this.page === 0;
    this.next.disabled = this.page >= pages - 1;
  }
}
