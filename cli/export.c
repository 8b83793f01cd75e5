/* export: trials → CSV with RFC 4180 quoting, or → one JSON document. */
#include "export.h"
#include "jsonout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"

static const cJSON *trial_array(const cJSON *trials) {
  if (cJSON_IsArray(trials)) return trials;
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(trials, "trials");
  return cJSON_IsArray(a) ? a : NULL;
}

/* A text cell that a spreadsheet would read as a formula (leading = + - @,
 * or a tab or CR before one) starts with a ' instead: trial output and
 * config strings are not the user's formulas. Numbers never come here. */
static int csv_formula_like(const char *s) { return *s && strchr("=+-@\t\r", *s) != NULL; }

static void csv_field(struct sbuf *sb, const char *s) {
  int guard = csv_formula_like(s);
  if (!strpbrk(s, ",\"\r\n")) {
    if (guard) sbuf_putc(sb, '\'');
    sbuf_puts(sb, s);
    return;
  }
  sbuf_putc(sb, '"');
  if (guard) sbuf_putc(sb, '\'');
  for (; *s; s++) {
    if (*s == '"') sbuf_putc(sb, '"');
    sbuf_putc(sb, *s);
  }
  sbuf_putc(sb, '"');
}

/* The shortest %.Ng that reads back as the same double. */
static void put_double(struct sbuf *sb, double d) {
  char buf[40];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, sizeof(buf), "%.*g", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
  sbuf_puts(sb, buf);
}

/* Numbers exactly (they read back the same), integral ones without a point. */
static void csv_value(struct sbuf *sb, const cJSON *v) {
  if (!v || cJSON_IsNull(v)) return;
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 9007199254740992.0)
      sbuf_printf(sb, "%.0f", d);
    else
      put_double(sb, d);
  } else if (cJSON_IsString(v)) {
    csv_field(sb, v->valuestring);
  } else if (cJSON_IsBool(v)) {
    sbuf_puts(sb, cJSON_IsTrue(v) ? "true" : "false");
  } else {
    char *t = jsonout_print(v);
    if (!t) {
      sb->err = -ENOMEM;
      return;
    }
    csv_field(sb, t);
    free(t);
  }
}

struct keys {
  const char **k;
  size_t n, cap;
};

static int keys_add(struct keys *ks, const char *k) {
  for (size_t i = 0; i < ks->n; i++)
    if (!strcmp(ks->k[i], k)) return 0;
  if (ks->n == ks->cap) {
    size_t cap = ks->cap ? ks->cap * 2 : 16;
    const char **nk = realloc(ks->k, cap * sizeof(*nk));
    if (!nk) return -ENOMEM;
    ks->k = nk;
    ks->cap = cap;
  }
  ks->k[ks->n++] = k;
  return 0;
}

/* ",config/<key>" for each config key. */
static void csv_config_columns(struct sbuf *sb, const struct keys *ck) {
  for (size_t i = 0; i < ck->n; i++) {
    char col[300];
    snprintf(col, sizeof(col), "config/%s", ck->k[i]);
    sbuf_putc(sb, ',');
    csv_field(sb, col);
  }
}

/* ",<value>" of each config key in cfg (empty where it has none). */
static void csv_config_cells(struct sbuf *sb, const struct keys *ck, const cJSON *cfg) {
  for (size_t i = 0; i < ck->n; i++) {
    sbuf_putc(sb, ',');
    csv_value(sb, cJSON_GetObjectItemCaseSensitive(cfg, ck->k[i]));
  }
}

int export_csv(const cJSON *trials, char **out) {
  const cJSON *arr = trial_array(trials);
  struct keys ck = {0}, rk = {0};
  struct sbuf sb;
  int rc = 0;
  *out = NULL;
  sbuf_init(&sb);
  if (!arr) return -EINVAL;
  const cJSON *t, *it;
  /* Columns: the union of keys in order of first appearance. */
  cJSON_ArrayForEach(t, arr) {
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(
                               t, "config")) if ((rc = keys_add(&ck, it->string))) goto done;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(
                               t, "last_result")) if ((rc = keys_add(&rk, it->string))) goto done;
  }
  sbuf_puts(&sb, "trial_id,name,status,stopped_early,iteration");
  csv_config_columns(&sb, &ck);
  for (size_t i = 0; i < rk.n; i++) {
    sbuf_putc(&sb, ',');
    csv_field(&sb, rk.k[i]);
  }
  sbuf_puts(&sb, ",error,attribution\n");
  cJSON_ArrayForEach(t, arr) {
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(t, "config");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(t, "last_result");
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "id"));
    sbuf_putc(&sb, ',');
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "name"));
    sbuf_putc(&sb, ',');
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "status"));
    sbuf_putc(&sb, ',');
    sbuf_puts(&sb, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "stopped_early")) ? "true"
                                                                                      : "false");
    sbuf_putc(&sb, ',');
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "iteration"));
    csv_config_cells(&sb, &ck, cfg);
    for (size_t i = 0; i < rk.n; i++) {
      sbuf_putc(&sb, ',');
      csv_value(&sb, cJSON_GetObjectItemCaseSensitive(res, rk.k[i]));
    }
    sbuf_putc(&sb, ',');
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "error"));
    sbuf_putc(&sb, ',');
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "attribution"));
    sbuf_putc(&sb, '\n');
  }
  rc = sbuf_take(&sb, out);
done:
  sbuf_free(&sb);
  free(ck.k);
  free(rk.k);
  return rc;
}

struct result_ref {
  double trial_id;
  size_t order; /* position in the results list: keeps their order */
  const cJSON *result;
};

static int cmp_ref(const void *a, const void *b) {
  const struct result_ref *x = a, *y = b;
  if (x->trial_id != y->trial_id) return x->trial_id < y->trial_id ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

int export_json(const cJSON *experiment, const cJSON *trials, const cJSON *results, char **out) {
  const cJSON *arr = trial_array(trials);
  struct result_ref *refs = NULL;
  size_t nrefs = 0;
  *out = NULL;
  if (!arr || !cJSON_IsObject(experiment)) return -EINVAL;
  cJSON *root = cJSON_CreateObject();
  cJSON *exp = cJSON_Duplicate(experiment, 1);
  cJSON *tarr = cJSON_Duplicate(arr, 1);
  if (!root || !exp || !tarr) goto nomem;
  cJSON_AddItemToObject(root, "experiment", exp);
  exp = NULL;
  /* Results grouped by trial with one sort: experiments can hold 10,000
   * trials and 100,000 results. */
  const cJSON *rarr = cJSON_GetObjectItemCaseSensitive(results, "results");
  int n = cJSON_GetArraySize(rarr);
  if (n > 0) {
    refs = malloc((size_t)n * sizeof(*refs));
    if (!refs) goto nomem;
    const cJSON *r;
    cJSON_ArrayForEach(r, rarr) {
      refs[nrefs] =
          (struct result_ref){cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "trial_id")),
                              nrefs, cJSON_GetObjectItemCaseSensitive(r, "result")};
      nrefs++;
    }
    qsort(refs, nrefs, sizeof(*refs), cmp_ref);
  }
  cJSON *t;
  cJSON_ArrayForEach(t, tarr) {
    cJSON *list = cJSON_AddArrayToObject(t, "results");
    if (!list) goto nomem;
    double id = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "id"));
    size_t lo = 0, hi = nrefs;
    while (lo < hi) { /* first ref with trial_id >= id */
      size_t mid = lo + (hi - lo) / 2;
      if (refs[mid].trial_id < id)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (size_t i = lo; i < nrefs && refs[i].trial_id == id; i++) {
      if (!refs[i].result) continue;
      cJSON *copy = cJSON_Duplicate(refs[i].result, 1);
      if (!copy) goto nomem;
      cJSON_AddItemToArray(list, copy);
    }
  }
  cJSON_AddItemToObject(root, "trials", tarr);
  tarr = NULL;
  free(refs);
  char *text = jsonout_print_pretty(root);
  cJSON_Delete(root);
  if (!text) return -ENOMEM;
  *out = text;
  return 0;
nomem:
  free(refs);
  cJSON_Delete(root);
  cJSON_Delete(exp);
  cJSON_Delete(tarr);
  return -ENOMEM;
}

int export_pareto_csv(const cJSON *pareto, char **out) {
  const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(pareto, "metrics");
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(pareto, "trials"), *t, *it;
  struct keys ck = {0};
  struct sbuf sb;
  int rc = 0;
  *out = NULL;
  if (!cJSON_IsArray(metrics) || !cJSON_IsArray(arr)) return -EINVAL;
  sbuf_init(&sb);
  cJSON_ArrayForEach(t, arr) {
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(t, "config")) {
      if ((rc = keys_add(&ck, it->string))) goto done;
    }
  }
  /* One column per objective (its score under the scope), then the config. */
  sbuf_puts(&sb, "trial_id,status");
  cJSON_ArrayForEach(it, metrics) {
    sbuf_putc(&sb, ',');
    csv_value(&sb, it);
  }
  csv_config_columns(&sb, &ck);
  sbuf_putc(&sb, '\n');
  cJSON_ArrayForEach(t, arr) {
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(t, "config");
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(t, "values");
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "trial_id"));
    sbuf_putc(&sb, ',');
    csv_value(&sb, cJSON_GetObjectItemCaseSensitive(t, "status"));
    cJSON_ArrayForEach(it, metrics) {
      sbuf_putc(&sb, ',');
      csv_value(&sb, cJSON_IsString(it) ? cJSON_GetObjectItemCaseSensitive(vals, it->valuestring)
                                        : NULL);
    }
    csv_config_cells(&sb, &ck, cfg);
    sbuf_putc(&sb, '\n');
  }
  rc = sbuf_take(&sb, out);
done:
  sbuf_free(&sb);
  free(ck.k);
  return rc;
}
