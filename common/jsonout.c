/* jsonout: exact JSON printing of a cJSON tree (see jsonout.h for why). */
#include "jsonout.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

/* An int64's decimal digits, as "%" PRId64 writes them. */
static int jsonout_int(int64_t v, char *buf) {
  char tmp[24];
  int n = 0, len = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) buf[len++] = '-';
  while (n) buf[len++] = tmp[--n];
  buf[len] = '\0';
  return len;
}

#ifdef __SIZEOF_INT128__
typedef unsigned __int128 jsonout_u128;

static jsonout_u128 jsonout_pow10(int k) {
  jsonout_u128 p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

/* digits (p of them, no leading zero) times 10^(x - p + 1) as "%.{p}g"
 * writes it for -4 <= x < p (%f's layout): trailing zeros and a bare point
 * dropped. */
static int jsonout_g(int neg, uint64_t digits, int p, int x, char *buf) {
  char d[20];
  int len = 0;
  for (int i = p - 1; i >= 0; i--, digits /= 10) d[i] = (char)('0' + digits % 10);
  int last = p - 1; /* the last digit kept */
  while (last > 0 && d[last] == '0') last--;
  if (neg) buf[len++] = '-';
  if (x >= 0) {
    for (int i = 0; i <= x; i++) buf[len++] = d[i];
    if (last > x) {
      buf[len++] = '.';
      for (int i = x + 1; i <= last; i++) buf[len++] = d[i];
    }
  } else {
    buf[len++] = '0';
    buf[len++] = '.';
    for (int i = -1; i > x; i--) buf[len++] = '0';
    for (int i = 0; i <= last; i++) buf[len++] = d[i];
  }
  buf[len] = '\0';
  return len;
}

/* The loop of jsonout_number below (the first of %.15g, %.16g, %.17g that
 * strtod reads back to v) in integer arithmetic, exactly: v = m * 2^-k is
 * scaled to p digits and rounded half to even as printf does, and the
 * digits read back to v when they lie inside v's rounding interval, (m -
 * 1/2) * 2^-k to (m + 1/2) * 2^-k, its ends too for an even m (strtod rounds
 * half to even). For a non-integral v with 2^-12 <= |v| < 10^15: every
 * product fits in 128 bits, %g's layout is %f's, and a power of two (whose
 * lower neighbour is nearer) has a short exact decimal, well inside. 0
 * elsewhere (the caller prints with snprintf). */
static int jsonout_fast(double v, char *buf) {
  int neg = v < 0, e2;
  double a = neg ? -v : v;
  if (!(a >= 0x1p-12 && a < 1e15)) return 0;
  uint64_t m = (uint64_t)ldexp(frexp(a, &e2), 53); /* exact: a = m * 2^-k */
  int k = 53 - e2;                                 /* 3 .. 64 */
  jsonout_u128 two_k = (jsonout_u128)1 << k;
  /* x = floor(log10(a)), -4 .. 14, made exact: a >= 10^x <=> m >= 10^x * 2^k. */
  int x = (int)floor(log10(a));
  for (;;) {
    int lo = x >= 0 ? m >= jsonout_pow10(x) * two_k : m * jsonout_pow10(-x) >= two_k;
    int hi = x + 1 >= 0 ? m >= jsonout_pow10(x + 1) * two_k : m * jsonout_pow10(-x - 1) >= two_k;
    if (lo && !hi) break;
    x += lo ? 1 : -1;
  }
  for (int p = 15; p <= 17; p++) {
    jsonout_u128 scale = jsonout_pow10(p - 1 - x); /* a * scale has p digits before the point */
    jsonout_u128 num = m * scale, q = num >> k, r = num & (two_k - 1);
    if (2 * r > two_k || (2 * r == two_k && (q & 1))) q++;
    /* q / scale against the interval's ends, all times 4 * scale * 2^k */
    jsonout_u128 at = 4 * q * two_k, up = (4 * (jsonout_u128)m + 2) * scale;
    jsonout_u128 down = (4 * (jsonout_u128)m - 2) * scale;
    int even = !(m & 1);
    if (p == 17 || ((at < up || (at == up && even)) && (at > down || (at == down && even)))) {
      if (q == jsonout_pow10(p)) { /* rounded up to the next power of ten */
        q /= 10;
        if (++x >= p) return 0; /* %e's layout */
      }
      return jsonout_g(neg, (uint64_t)q, p, x, buf);
    }
  }
  return 0;
}
#else
static int jsonout_fast(double v, char *buf) {
  (void)v, (void)buf;
  return 0;
}
#endif

int jsonout_number(double v, char *buf, size_t cap) {
  int n;
  if (!isfinite(v)) {
    n = snprintf(buf, cap, "null");
  } else if (v == 0 && signbit(v)) {
    n = snprintf(buf, cap, "-0"); /* keeps the sign bit: strtod("-0") is -0.0 */
  } else if (v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0) {
    /* Exact: every integral double in [-2^63, 2^63) converts to int64. */
    n = cap >= JSONOUT_NUMBER_MAX ? jsonout_int((int64_t)v, buf)
                                  : snprintf(buf, cap, "%" PRId64, (int64_t)v);
  } else if (cap >= JSONOUT_NUMBER_MAX && (n = jsonout_fast(v, buf)) > 0) {
    /* the same text as the loop below, without printf's and strtod's
     * multi-precision arithmetic */
  } else {
    /* 17 significant digits always round-trip; take fewer when they do too.
     * strtod rounds correctly, so "reads back identical" is a bit test. */
    n = 0;
    for (int prec = 15; prec <= 17; prec++) {
      n = snprintf(buf, cap, "%.*g", prec, v);
      if (prec == 17 || strtod(buf, NULL) == v) break;
    }
  }
  return n;
}

static void jb_tabs(struct sbuf *b, int depth) {
  for (int i = 0; i < depth; i++) sbuf_putc(b, '\t');
}

/* The same escapes as cJSON: the short ones, \u00XX for other controls,
 * every other byte as it is (the caller's strings are UTF-8). */
static void jb_string(struct sbuf *b, const char *s) {
  sbuf_putc(b, '"');
  if (s) {
    const char *run = s;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
      const char *esc = NULL;
      char u[8];
      switch (*c) {
      case '"':
        esc = "\\\"";
        break;
      case '\\':
        esc = "\\\\";
        break;
      case '\b':
        esc = "\\b";
        break;
      case '\f':
        esc = "\\f";
        break;
      case '\n':
        esc = "\\n";
        break;
      case '\r':
        esc = "\\r";
        break;
      case '\t':
        esc = "\\t";
        break;
      default:
        if (*c < 0x20) {
          snprintf(u, sizeof u, "\\u%04x", *c);
          esc = u;
        }
      }
      if (!esc) continue;
      sbuf_putn(b, run, (size_t)((const char *)c - run));
      sbuf_putn(b, esc, strlen(esc));
      run = (const char *)c + 1;
    }
    sbuf_putn(b, run, strlen(run));
  }
  sbuf_putc(b, '"');
}

static void jb_value(struct sbuf *b, const cJSON *item, int depth, int pretty) {
  char num[JSONOUT_NUMBER_MAX];
  if (!item) {
    sbuf_fail(b, -EINVAL); /* cJSON_Print fails on a NULL item as well */
    return;
  }
  switch (item->type & 0xff) {
  case cJSON_NULL:
    sbuf_putn(b, "null", 4);
    break;
  case cJSON_False:
    sbuf_putn(b, "false", 5);
    break;
  case cJSON_True:
    sbuf_putn(b, "true", 4);
    break;
  case cJSON_Number: {
    int n = jsonout_number(item->valuedouble, num, sizeof num);
    sbuf_putn(b, num, (size_t)n);
    break;
  }
  case cJSON_String:
    jb_string(b, item->valuestring);
    break;
  case cJSON_Raw:
    if (!item->valuestring)
      sbuf_fail(b, -EINVAL); /* as cJSON: a raw node needs its text */
    else
      sbuf_putn(b, item->valuestring, strlen(item->valuestring));
    break;
  case cJSON_Array:
    sbuf_putc(b, '[');
    for (const cJSON *c = item->child; c; c = c->next) {
      jb_value(b, c, depth + 1, pretty);
      if (c->next) sbuf_putn(b, pretty ? ", " : ",", pretty ? 2 : 1);
    }
    sbuf_putc(b, ']');
    break;
  case cJSON_Object:
    sbuf_putc(b, '{');
    if (pretty) sbuf_putc(b, '\n');
    for (const cJSON *c = item->child; c; c = c->next) {
      if (pretty) jb_tabs(b, depth + 1);
      jb_string(b, c->string);
      sbuf_putc(b, ':');
      if (pretty) sbuf_putc(b, '\t');
      jb_value(b, c, depth + 1, pretty);
      if (c->next) sbuf_putc(b, ',');
      if (pretty) sbuf_putc(b, '\n');
    }
    if (pretty) jb_tabs(b, depth);
    sbuf_putc(b, '}');
    break;
  default:
    sbuf_fail(b, -EINVAL); /* cJSON_Invalid: nothing to print */
  }
}

static char *jsonout_run(const cJSON *item, int pretty) {
  struct sbuf b;
  char *out;
  sbuf_init(&b);
  jb_value(&b, item, 0, pretty);
  return sbuf_take(&b, &out) ? NULL : out;
}

char *jsonout_print(const cJSON *item) { return jsonout_run(item, 0); }

char *jsonout_print_pretty(const cJSON *item) { return jsonout_run(item, 1); }

cJSON *jsonout_int64(int64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  return cJSON_CreateRaw(buf);
}

cJSON *jsonout_uint64(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRIu64, v);
  return cJSON_CreateRaw(buf);
}

cJSON *jsonout_add_int64(cJSON *object, const char *name, int64_t v) {
  cJSON *n = jsonout_int64(v);
  if (n && !cJSON_AddItemToObject(object, name, n)) {
    cJSON_Delete(n);
    n = NULL;
  }
  return n;
}
