/* JSON-line result parser: pure, one line in, one flat object out. */
#include "result.h"
#include "jsonstrict.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens outside JSON that Python's json.dumps (NaN, Infinity, -Infinity),
 * NumPy and C's printf (nan, -nan, inf, -inf) write for non-finite floats.
 * Each one is read as null: "no finite value" (ASHA treats null as such). */
static const char *const result_nonfinite[] = {
    "-Infinity", "Infinity", "-NaN", "NaN", "-nan", "nan", "-inf", "inf", "-Inf", "Inf",
};

static int result_is_delim(char c) {
  return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Length of the non-finite token at s[i..len) when one stands there as a
 * whole value, else 0. */
static size_t result_token_at(const char *s, size_t i, size_t len) {
  for (size_t k = 0; k < sizeof result_nonfinite / sizeof result_nonfinite[0]; k++) {
    size_t n = strlen(result_nonfinite[k]);
    if (i + n <= len && !memcmp(s + i, result_nonfinite[k], n) &&
        (i + n == len || result_is_delim(s[i + n])))
      return n;
  }
  return 0;
}

char *result_fix_nonfinite(const char *line, size_t len, size_t *out_len) {
  /* Each token is at least 3 bytes and becomes 4 ("null"). */
  char *out = malloc(len + len / 3 + 2);
  if (!out) return NULL;
  size_t o = 0;
  int in_str = 0;
  char prev = '\0'; /* last non-blank byte outside strings */
  for (size_t i = 0; i < len; i++) {
    char c = line[i];
    if (in_str) {
      out[o++] = c;
      if (c == '\\' && i + 1 < len)
        out[o++] = line[++i];
      else if (c == '"')
        in_str = 0;
      continue;
    }
    if (c == '"') {
      in_str = 1;
      out[o++] = c;
      prev = c;
      continue;
    }
    /* Only where a value may start: after ':', ',' or '['. */
    if (prev == ':' || prev == ',' || prev == '[') {
      size_t n = result_token_at(line, i, len);
      if (n) {
        memcpy(out + o, "null", 4);
        o += 4;
        i += n - 1;
        prev = 'l';
        continue;
      }
    }
    out[o++] = c;
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') prev = c;
  }
  out[o] = '\0';
  *out_len = o;
  return out;
}

int result_parse_line(const char *line, size_t len, const char *time_attr, cJSON **out, double *t) {
  return result_parse_line_opt(line, len, time_attr, 0, out, t);
}

int result_parse_line_opt(const char *line, size_t len, const char *time_attr, int allow_missing,
                          cJSON **out, double *t) {
  struct result_ckpt ck;
  return result_parse_line_ckpt(line, len, time_attr, allow_missing, out, t, &ck);
}

static int result_whole(const cJSON *v, double max) {
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 &&
         v->valuedouble <= max && v->valuedouble == floor(v->valuedouble);
}

/* The RESULT_CKPT_KEY member of obj, checked. */
static void result_read_ckpt(const cJSON *obj, struct result_ckpt *ck) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, RESULT_CKPT_KEY);
  if (!c) return;
  ck->state = RESULT_CKPT_BAD;
  if (!cJSON_IsObject(c)) return;
  const cJSON *ino = cJSON_GetObjectItemCaseSensitive(c, "ino");
  const cJSON *size = cJSON_GetObjectItemCaseSensitive(c, "size");
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(c, "training_iteration");
  /* 2^53: what a double holds exactly. */
  if (!result_whole(ino, 9007199254740992.0) || !result_whole(size, 9007199254740992.0)) return;
  if (it && !cJSON_IsNull(it) && !(cJSON_IsNumber(it) && isfinite(it->valuedouble))) return;
  ck->ino = (unsigned long long)ino->valuedouble;
  ck->size = (long long)size->valuedouble;
  ck->has_iter = it && cJSON_IsNumber(it);
  ck->iter = ck->has_iter ? it->valuedouble : 0;
  ck->state = RESULT_CKPT_OK;
}

int result_parse_line_ckpt(const char *line, size_t len, const char *time_attr, int allow_missing,
                           cJSON **out, double *t, struct result_ckpt *ck) {
  *out = NULL;
  memset(ck, 0, sizeof *ck);
  /* Cheap reject before parsing: log lines rarely start with '{'. */
  size_t i = 0;
  while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
  if (i == len || line[i] != '{') return 0;
  size_t fl;
  char *fixed = result_fix_nonfinite(line + i, len - i, &fl);
  if (!fixed) return -ENOMEM;
  const char *end = NULL;
  cJSON *obj = cJSON_ParseWithLengthOpts(fixed, fl, &end, 0);
  int rc = RESULT_MALFORMED;
  if (!obj) goto done;
  /* Trailing garbage ("{...} extra", two objects on one line) is not a
   * result either: half a line must not pass for a whole one. */
  for (const char *p = end; p && p < fixed + fl; p++)
    if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != '\0') goto done;
  if (!cJSON_IsObject(obj)) goto done;
  result_read_ckpt(obj, ck);
  const cJSON *tv = cJSON_GetObjectItemCaseSensitive(obj, time_attr);
  if (!tv && !allow_missing) {
    rc = 0;
    goto done;
  } /* some other JSON it prints */
  if (!tv) {
    /* Ray's habit: {"loss": 0.5} is a result, numbered by the worker. JSON
     * without a single number (a structured log line) is still log output. */
    const cJSON *c;
    int numbers = 0;
    cJSON_ArrayForEach(c, obj) numbers +=
        (cJSON_IsNumber(c) || cJSON_IsNull(c)) && strcmp(c->string, RESULT_CKPT_KEY) != 0;
    if (!cJSON_IsObject(obj) || !numbers) {
      rc = 0;
      goto done;
    }
  }
  /* A NUL in a string or a key given twice: the server refuses it (400). */
  int strict = jsonstrict_check(fixed, fl, NULL);
  if (strict) {
    if (strict != -EINVAL) rc = strict;
    goto done;
  }
  /* The time attribute present but not a finite number: a broken result. */
  if (tv && (!cJSON_IsNumber(tv) || !isfinite(tv->valuedouble))) goto done;
  cJSON *flat = cJSON_CreateObject();
  if (!flat) {
    rc = -ENOMEM;
    goto done;
  }
  const cJSON *m;
  cJSON_ArrayForEach(m, obj) {
    if ((!cJSON_IsNumber(m) && !cJSON_IsNull(m)) || !m->string) continue;
    if (!strcmp(m->string, RESULT_CKPT_KEY)) continue; /* the worker's, not a metric */
    if (cJSON_GetObjectItemCaseSensitive(flat, m->string)) continue; /* first wins */
    cJSON *v = cJSON_IsNull(m) ? cJSON_AddNullToObject(flat, m->string)
                               : cJSON_AddNumberToObject(flat, m->string, m->valuedouble);
    if (!v) {
      cJSON_Delete(flat);
      rc = -ENOMEM;
      goto done;
    }
  }
  *t = tv ? tv->valuedouble : NAN;
  *out = flat;
  rc = 1;
done:
  if (rc < 0) memset(ck, 0, sizeof *ck); /* not a line to act on */
  cJSON_Delete(obj);
  free(fixed);
  return rc;
}

/* Adds name = v unless the result already has name. */
static int result_add_missing(cJSON *flat, const char *name, double v) {
  if (cJSON_GetObjectItemCaseSensitive(flat, name)) return 0;
  return cJSON_AddNumberToObject(flat, name, v) ? 0 : -ENOMEM;
}

int result_fill(cJSON *flat, const char *time_attr, struct result_clock *c, double now_mono,
                double now_wall, double *tv) {
  int rc = 0;
  if (!strcmp(time_attr, "training_iteration") &&
      !cJSON_GetObjectItemCaseSensitive(flat, "training_iteration"))
    rc = result_add_missing(flat, "training_iteration", c->prev_iter + 1);
  /* The next number follows whatever this result says, filled in or not. */
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(flat, "training_iteration");
  if (cJSON_IsNumber(it) && isfinite(it->valuedouble)) c->prev_iter = it->valuedouble;
  double since = c->nresults ? c->prev_mono : c->started_mono;
  if (!rc) rc = result_add_missing(flat, "time_this_iter_s", now_mono - since);
  if (!rc)
    rc = result_add_missing(flat, "time_total_s", c->start_total + (now_mono - c->started_mono));
  if (!rc) rc = result_add_missing(flat, "timestamp", floor(now_wall));
  if (rc) return rc;
  c->prev_mono = now_mono;
  c->nresults++;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(flat, time_attr);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return -EINVAL;
  *tv = v->valuedouble;
  return 0;
}

char *result_missing_metric(const cJSON *flat, const char *metric) {
  if (!metric || !*metric) return NULL;
  const char *name = metric, *comma = NULL;
  int several = strchr(metric, ',') != NULL, len = 0;
  for (;;) {
    comma = strchr(name, ',');
    len = comma ? (int)(comma - name) : (int)strlen(name);
    const cJSON *c;
    int found = 0;
    cJSON_ArrayForEach(c, flat) if ((int)strlen(c->string) == len &&
                                    !strncmp(c->string, name, (size_t)len)) found = 1;
    if (!found) break;
    if (!comma) return NULL;
    name = comma + 1;
  }
  char *buf = NULL;
  size_t blen = 0;
  FILE *f = open_memstream(&buf, &blen);
  if (!f) return NULL;
  if (several) {
    fprintf(f, "result has no metric '%.*s' (one of the experiment's metrics ", len, name);
    for (const char *p = metric; *p; p++) *p == ',' ? fputs(", ", f) : fputc(*p, f);
    fputs("); it reported: ", f);
  } else {
    fprintf(f, "result has no metric '%s' (the experiment's metric); it reported: ", metric);
  }
  const cJSON *c;
  int n = 0;
  cJSON_ArrayForEach(c, flat) fprintf(f, "%s%s", n++ ? ", " : "", c->string);
  if (!n) fputs("nothing", f);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

int result_required_metrics(const cJSON *lease, char **out) {
  const cJSON *me = cJSON_GetObjectItemCaseSensitive(lease, "metric"), *c;
  char *list = NULL;
  int rc = result_join_names(cJSON_GetObjectItemCaseSensitive(lease, "metrics"), &list);
  *out = NULL;
  if (rc < 0) return rc;
  if (!list && cJSON_IsString(me) && me->valuestring[0] && !(list = strdup(me->valuestring)))
    return -ENOMEM;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(lease, "constraint_metrics")) {
    if (!cJSON_IsString(c) || !c->valuestring[0]) continue;
    size_t n = strlen(c->valuestring), have = 0;
    for (const char *p = list; p && *p;) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      have |= len == n && !strncmp(p, c->valuestring, n);
      p = comma ? comma + 1 : p + len;
    }
    if (have) continue;
    char *joined = NULL;
    if (asprintf(&joined, "%s%s%s", list ? list : "", list ? "," : "", c->valuestring) < 0) {
      free(list);
      return -ENOMEM;
    }
    free(list);
    list = joined;
  }
  *out = list;
  return 0;
}

int result_join_names(const cJSON *arr, char **out) {
  const cJSON *c;
  size_t len = 0;
  *out = NULL;
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1) return 0;
  cJSON_ArrayForEach(c, arr) {
    if (!cJSON_IsString(c)) return 0;
    len += strlen(c->valuestring) + 1;
  }
  char *s = malloc(len + 1), *w = s;
  int i = 0;
  if (!s) return -ENOMEM;
  cJSON_ArrayForEach(c, arr) {
    size_t l = strlen(c->valuestring);
    if (i++) *w++ = ',';
    memcpy(w, c->valuestring, l);
    w += l;
  }
  *w = '\0';
  *out = s;
  return 0;
}
