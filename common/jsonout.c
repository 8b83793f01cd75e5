/* jsonout: exact JSON printing of a cJSON tree (see jsonout.h for why). */
#include "jsonout.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

int jsonout_number(double v, char *buf, size_t cap) {
  int n;
  if (!isfinite(v)) {
    n = snprintf(buf, cap, "null");
  } else if (v == 0 && signbit(v)) {
    n = snprintf(buf, cap, "-0"); /* keeps the sign bit: strtod("-0") is -0.0 */
  } else if (v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0) {
    /* Exact: every integral double in [-2^63, 2^63) converts to int64. */
    n = snprintf(buf, cap, "%" PRId64, (int64_t)v);
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
