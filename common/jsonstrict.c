/* jsonstrict: one pass over JSON text with an explicit stack (no recursion,
 * so a deep body cannot exhaust a server thread's stack). Object keys are
 * decoded into one arena and entered into one hash set keyed by (object id,
 * key), so duplicate detection is linear in the text however wide an object
 * is. Values are validated, never decoded. */
#include "jsonstrict.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct js_frame {
  int is_obj;
  uint64_t id;  /* this object's id in the key set */
  size_t index; /* element number (arrays) */
  int has_key;  /* objects: key_off/key_len name the current member */
  size_t key_off;
  size_t key_len;
};

struct js_slot {
  uint64_t id; /* 0: empty */
  uint64_t hash;
  size_t off, len;
};

struct js {
  const unsigned char *p;
  size_t len, pos;
  struct js_frame *stack;
  int depth, stack_cap;
  char *arena;
  size_t arena_len, arena_cap;
  struct js_slot *tab;
  size_t tab_cap, tab_n;
  uint64_t next_id;
  struct jsonstrict_error *err;
};

/* Appends s (n bytes) to the path buffer, escaping what is not printable so
 * the path stays one readable line (a key may itself hold \u0000). */
static void js_path_put(char *dst, size_t size, size_t *at, const char *s, size_t n) {
  for (size_t i = 0; i < n && *at + 1 < size; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7f) {
      if (*at + 7 >= size) break;
      *at += (size_t)snprintf(dst + *at, size - *at, "\\u%04x", c);
    } else {
      dst[(*at)++] = (char)c;
    }
  }
  dst[*at] = 0;
}

/* Key bytes at off; the arena is still NULL while every key so far was "". */
static const char *js_key_at(const struct js *s, size_t off) {
  return s->arena ? s->arena + off : "";
}

static void js_path(const struct js *s, char *dst, size_t size) {
  size_t at = 0;
  dst[0] = 0;
  for (int i = 0; i < s->depth; i++) {
    const struct js_frame *f = &s->stack[i];
    if (f->is_obj) {
      if (!f->has_key) break; /* the error is in the key itself: name the object */
      if (at) js_path_put(dst, size, &at, ".", 1);
      js_path_put(dst, size, &at, js_key_at(s, f->key_off), f->key_len);
    } else {
      char idx[32];
      int n = snprintf(idx, sizeof idx, "[%zu]", f->index);
      js_path_put(dst, size, &at, idx, (size_t)n);
    }
  }
}

static int js_fail(struct js *s, enum jsonstrict_problem problem, size_t offset, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));
static int js_fail(struct js *s, enum jsonstrict_problem problem, size_t offset, const char *fmt,
                   ...) {
  struct jsonstrict_error *e = s->err;
  if (!e) return -EINVAL;
  e->problem = problem;
  e->offset = offset;
  js_path(s, e->path, sizeof e->path);
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(e->message, sizeof e->message, "%s%s%s (byte %zu)", what, e->path[0] ? " at " : "",
           e->path, offset);
  return -EINVAL;
}

static void js_ws(struct js *s) {
  while (s->pos < s->len) {
    unsigned char c = s->p[s->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    s->pos++;
  }
}

static int js_arena_put(struct js *s, const char *b, size_t n) {
  if (s->arena_len + n > s->arena_cap) {
    size_t cap = s->arena_cap ? s->arena_cap : 256;
    while (cap < s->arena_len + n) cap *= 2;
    char *a = realloc(s->arena, cap);
    if (!a) return -ENOMEM;
    s->arena = a;
    s->arena_cap = cap;
  }
  memcpy(s->arena + s->arena_len, b, n);
  s->arena_len += n;
  return 0;
}

static int js_hex4(const unsigned char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i], d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return -1;
    v = v << 4 | d;
  }
  *out = v;
  return 0;
}

/* Length of the UTF-8 sequence at p (at most avail bytes), 0 when invalid
 * (overlong, surrogate, above U+10FFFF, truncated). */
static size_t js_utf8_len(const unsigned char *p, size_t avail) {
  unsigned c = p[0];
  size_t n;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (avail < n || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

/* Scans the string at s->pos (its opening quote). With decode set, its
 * decoded UTF-8 bytes are appended to the arena. *nul_at gets the offset of
 * the first \u0000 escape, or SIZE_MAX. */
static int js_string(struct js *s, int decode, size_t *nul_at) {
  *nul_at = SIZE_MAX;
  size_t start = s->pos++;
  while (s->pos < s->len) {
    unsigned char c = s->p[s->pos];
    if (c == '"') {
      s->pos++;
      return 0;
    }
    if (c < 0x20)
      return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "raw control character 0x%02x in a string", c);
    if (c >= 0x80) {
      size_t n = js_utf8_len(s->p + s->pos, s->len - s->pos);
      if (!n) return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "invalid UTF-8 in a string");
      if (decode && js_arena_put(s, (const char *)s->p + s->pos, n)) return -ENOMEM;
      s->pos += n;
      continue;
    }
    if (c != '\\') {
      if (decode && js_arena_put(s, (const char *)&c, 1)) return -ENOMEM;
      s->pos++;
      continue;
    }
    size_t esc = s->pos;
    if (s->pos + 1 >= s->len) break;
    unsigned char e = s->p[s->pos + 1];
    char one = 0;
    switch (e) {
    case '"':
      one = '"';
      break;
    case '\\':
      one = '\\';
      break;
    case '/':
      one = '/';
      break;
    case 'b':
      one = '\b';
      break;
    case 'f':
      one = '\f';
      break;
    case 'n':
      one = '\n';
      break;
    case 'r':
      one = '\r';
      break;
    case 't':
      one = '\t';
      break;
    case 'u':
      break;
    default:
      return js_fail(s, JSONSTRICT_SYNTAX, esc, "invalid escape \\%c in a string",
                     e >= 0x20 && e < 0x7f ? e : '?');
    }
    if (e != 'u') {
      if (decode && js_arena_put(s, &one, 1)) return -ENOMEM;
      s->pos += 2;
      continue;
    }
    unsigned cp, lo;
    if (s->pos + 6 > s->len || js_hex4(s->p + s->pos + 2, &cp))
      return js_fail(s, JSONSTRICT_SYNTAX, esc, "invalid \\u escape in a string");
    s->pos += 6;
    if (cp >= 0xdc00 && cp <= 0xdfff)
      return js_fail(s, JSONSTRICT_SYNTAX, esc, "lone low surrogate \\u%04x in a string", cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (s->pos + 6 > s->len || s->p[s->pos] != '\\' || s->p[s->pos + 1] != 'u' ||
          js_hex4(s->p + s->pos + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
        return js_fail(s, JSONSTRICT_SYNTAX, esc, "lone high surrogate \\u%04x in a string", cp);
      s->pos += 6;
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp == 0 && *nul_at == SIZE_MAX) *nul_at = esc;
    if (decode) {
      char u[4];
      size_t n;
      if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
      } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
      } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
      } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
      }
      if (js_arena_put(s, u, n)) return -ENOMEM;
    }
  }
  return js_fail(s, JSONSTRICT_SYNTAX, start, "unterminated string");
}

static uint64_t js_hash(uint64_t id, const char *k, size_t n) {
  uint64_t h = 1469598103934665603ull ^ (id * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)k[i];
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

static int js_tab_grow(struct js *s) {
  size_t cap = s->tab_cap ? s->tab_cap * 2 : 64;
  struct js_slot *t = calloc(cap, sizeof *t);
  if (!t) return -ENOMEM;
  for (size_t i = 0; i < s->tab_cap; i++) {
    if (!s->tab[i].id) continue;
    size_t j = s->tab[i].hash & (cap - 1);
    while (t[j].id) j = (j + 1) & (cap - 1);
    t[j] = s->tab[i];
  }
  free(s->tab);
  s->tab = t;
  s->tab_cap = cap;
  return 0;
}

/* Enters the key arena[off, off+len) of object id; 1 when it was there. */
static int js_key_insert(struct js *s, uint64_t id, size_t off, size_t len) {
  if ((s->tab_n + 1) * 2 > s->tab_cap && js_tab_grow(s)) return -ENOMEM;
  const char *key = js_key_at(s, off);
  uint64_t h = js_hash(id, key, len);
  size_t j = h & (s->tab_cap - 1);
  while (s->tab[j].id) {
    const struct js_slot *e = &s->tab[j];
    if (e->id == id && e->hash == h && e->len == len && !memcmp(js_key_at(s, e->off), key, len))
      return 1;
    j = (j + 1) & (s->tab_cap - 1);
  }
  s->tab[j] = (struct js_slot){.id = id, .hash = h, .off = off, .len = len};
  s->tab_n++;
  return 0;
}

/* At a key's opening quote inside the top object: scans it, checks it is
 * new in that object, and consumes the ':' after it. */
static int js_key(struct js *s) {
  struct js_frame *f = &s->stack[s->depth - 1];
  f->has_key = 0;
  if (s->pos >= s->len || s->p[s->pos] != '"')
    return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "expected a string key");
  size_t at = s->pos, off = s->arena_len, nul_at;
  int rc = js_string(s, 1, &nul_at);
  if (rc) return rc;
  f->key_off = off;
  f->key_len = s->arena_len - off;
  f->has_key = 1;
  if (nul_at != SIZE_MAX)
    return js_fail(s, JSONSTRICT_NUL, nul_at, "a key holds a NUL character (\\u0000)");
  rc = js_key_insert(s, f->id, off, f->key_len);
  if (rc < 0) return rc;
  if (rc) return js_fail(s, JSONSTRICT_DUPLICATE, at, "duplicate key");
  js_ws(s);
  if (s->pos >= s->len || s->p[s->pos] != ':')
    return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "expected ':' after a key");
  s->pos++;
  return 0;
}

static int js_digits(struct js *s) {
  size_t from = s->pos;
  while (s->pos < s->len && s->p[s->pos] >= '0' && s->p[s->pos] <= '9') s->pos++;
  return s->pos > from;
}

static int js_number(struct js *s) {
  size_t at = s->pos;
  if (s->p[s->pos] == '-') s->pos++;
  if (s->pos < s->len && s->p[s->pos] == '0') {
    s->pos++;
  } else if (!js_digits(s)) {
    return js_fail(s, JSONSTRICT_SYNTAX, at, "invalid number");
  }
  if (s->pos < s->len && s->p[s->pos] == '.') {
    s->pos++;
    if (!js_digits(s)) return js_fail(s, JSONSTRICT_SYNTAX, at, "invalid number");
  }
  if (s->pos < s->len && (s->p[s->pos] == 'e' || s->p[s->pos] == 'E')) {
    s->pos++;
    if (s->pos < s->len && (s->p[s->pos] == '+' || s->p[s->pos] == '-')) s->pos++;
    if (!js_digits(s)) return js_fail(s, JSONSTRICT_SYNTAX, at, "invalid number");
  }
  return 0;
}

static int js_push(struct js *s, int is_obj) {
  if (s->depth == JSONSTRICT_MAX_DEPTH)
    return js_fail(s, JSONSTRICT_DEPTH, s->pos, "nested deeper than %d levels",
                   JSONSTRICT_MAX_DEPTH);
  if (s->depth == s->stack_cap) {
    int cap = s->stack_cap ? s->stack_cap * 2 : 16;
    struct js_frame *st = realloc(s->stack, (size_t)cap * sizeof *st);
    if (!st) return -ENOMEM;
    s->stack = st;
    s->stack_cap = cap;
  }
  s->stack[s->depth++] = (struct js_frame){.is_obj = is_obj, .id = ++s->next_id};
  return 0;
}

static int js_run(struct js *s) {
  for (;;) {
    /* A value is expected here. */
    js_ws(s);
    if (s->pos >= s->len) return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "expected a value");
    unsigned char c = s->p[s->pos];
    int rc = 0;
    if (c == '{' || c == '[') {
      if ((rc = js_push(s, c == '{'))) return rc;
      s->pos++;
      js_ws(s);
      if (s->pos < s->len && s->p[s->pos] == (c == '{' ? '}' : ']')) {
        s->pos++;
        s->depth--;
      } else if (c == '{') {
        if ((rc = js_key(s))) return rc;
        continue;
      } else {
        continue;
      }
    } else if (c == '"') {
      size_t nul_at;
      if ((rc = js_string(s, 0, &nul_at))) return rc;
      if (nul_at != SIZE_MAX)
        return js_fail(s, JSONSTRICT_NUL, nul_at, "a string holds a NUL character (\\u0000)");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if ((rc = js_number(s))) return rc;
    } else {
      static const char *const lits[] = {"true", "false", "null"};
      size_t i = 0;
      for (; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if (s->len - s->pos >= n && !memcmp(s->p + s->pos, lits[i], n)) {
          s->pos += n;
          break;
        }
      }
      if (i == 3) return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "expected a value");
    }
    /* A value ended: close containers or move to the next element. */
    for (;;) {
      js_ws(s);
      if (!s->depth) {
        if (s->pos != s->len)
          return js_fail(s, JSONSTRICT_TRAILING, s->pos, "unexpected data after the JSON value");
        return 0;
      }
      struct js_frame *f = &s->stack[s->depth - 1];
      if (s->pos >= s->len)
        return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "unexpected end (expected ',' or '%c')",
                       f->is_obj ? '}' : ']');
      c = s->p[s->pos];
      if (c == (f->is_obj ? '}' : ']')) {
        s->pos++;
        s->depth--;
        continue;
      }
      if (c != ',')
        return js_fail(s, JSONSTRICT_SYNTAX, s->pos, "expected ',' or '%c'", f->is_obj ? '}' : ']');
      s->pos++;
      f->index++;
      if (f->is_obj) {
        js_ws(s);
        if ((rc = js_key(s))) return rc;
      }
      break;
    }
  }
}

int jsonstrict_check(const char *text, size_t len, struct jsonstrict_error *err) {
  struct js s = {.p = (const unsigned char *)text, .len = len, .err = err};
  if (err) memset(err, 0, sizeof *err);
  int rc = js_run(&s);
  free(s.stack);
  free(s.arena);
  free(s.tab);
  return rc;
}
