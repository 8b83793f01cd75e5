// REST client for /api/v1: JSON in and out, the bearer token from sessionStorage,
// and one shared prompt for a token when the server answers 401.
const TOKEN_KEY = 'ctune-token';

export class ApiError extends Error {
  constructor(status, code, message, path) {
    super(message);
    this.status = status;
    this.code = code;
    this.path = path;
  }
}

let lastRole = null; // X-Ctune-Role of the latest reply; null: not told (e.g. --no-auth)
let tokenPrompt = null; // one prompt at a time, shared by every waiting request

function askToken(wasWrong) {
  if (tokenPrompt) return tokenPrompt;
  const dlg = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  document.getElementById('token-why').textContent = wasWrong
    ? 'The server refused that token. Enter another one.'
    : 'Not logged in (or the server restarted). Open the dashboard URL the server printed '
      + '(…/?token=…), or enter a token here; it is kept for this tab only (sessionStorage).';
  input.value = '';
  tokenPrompt = new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      const t = input.value.trim();
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      tokenPrompt = null;
      resolve(Boolean(t));
    }, { once: true });
    dlg.showModal();
    input.focus();
  });
  return tokenPrompt;
}

async function request(method, path, body) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(path, {
      method, headers, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401) {
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      if (await askToken(Boolean(token))) continue;
      throw new ApiError(401, 'unauthorized', 'this server needs a token', path);
    }
    // Who this session is (admin or viewer): the server names it on every
    // authenticated reply, so the pages hide the controls a viewer cannot use.
    const role = res.headers.get('X-Ctune-Role');
    if (role) lastRole = role;
    if (res.status === 204) return null;
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      throw new ApiError(res.status, 'bad_json', `${method} ${path}: the server sent no JSON (HTTP ${res.status})`, path);
    }
    if (!res.ok) {
      const e = (data && data.error) || {};
      throw new ApiError(res.status, e.code || 'http_' + res.status,
        e.message || `${method} ${path} failed with HTTP ${res.status}`, e.path || path);
    }
    return data;
  }
  throw new ApiError(401, 'unauthorized', 'the server refused every token given', path);
}

export const api = {
  get: (path) => request('GET', '/api/v1' + path),
  post: (path, body) => request('POST', '/api/v1' + path, body ?? {}),
  patch: (path, body) => request('PATCH', '/api/v1' + path, body ?? {}),
  del: (path) => request('DELETE', '/api/v1' + path),
  // 'admin', 'viewer', or null when the server did not say (no tokens: all allowed).
  role: () => lastRole,
  setRole: (r) => { lastRole = r; },
};
