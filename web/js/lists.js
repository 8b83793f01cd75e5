// Every list endpoint answers one page and a "next_cursor" (null
// on the last page). getAll reads them all, 10,000 at a time, into one
// document shaped like a single page ({key: [...], ...}).
import { api } from './api.js';

export async function getAll(path, key) {
  const sep = path.includes('?') ? '&' : '?';
  const doc = await api.get(`${path}${sep}limit=10000`);
  for (let pages = 0; doc && typeof doc.next_cursor === 'string' && pages < 10000; pages++) {
    const more = await api.get(`${path}${sep}limit=10000&cursor=${encodeURIComponent(doc.next_cursor)}`);
    doc[key] = (doc[key] || []).concat((more && more[key]) || []);
    doc.next_cursor = more ? more.next_cursor : null;
  }
  return doc;
}
