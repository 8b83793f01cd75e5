/* report: renders an experiment's progress in Ray Tune's style (status block,
 * trial table, "… N more" lines) and its JSON twin, from plain state. */
#include "report.h"
#include "jsonout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbuf.h"
#include "text.h"

static const char *const STATUS_ORDER[] = {"RUNNING", "PENDING", "PAUSED", "TERMINATED", "ERROR"};
#define NSTATUS 5

/* Result keys the table never shows as metric columns: the iteration and the
 * total time have their own columns, the rest is noise. */
static int is_time_key(const char *k, const char *time_attr) {
  return !strcmp(k, "training_iteration") || !strcmp(k, "time_this_iter_s") ||
         !strcmp(k, "time_total_s") || !strcmp(k, "timestamp") || !strcmp(k, "done") ||
         (time_attr && !strcmp(k, time_attr));
}

/* Result keys that are about the run rather than the model's quality. */
static int is_minor_key(const char *k) {
  return !strcmp(k, "samples_per_s") || !strcmp(k, "train_loss") || !strcmp(k, "gpu_mem_mb");
}

static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *get_str(const cJSON *o, const char *k) {
  const cJSON *v = get(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double get_num(const cJSON *o, const char *k, double dflt) {
  const cJSON *v = get(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

void report_fmt_value(const cJSON *v, char *buf, size_t len) {
  if (!len) return;
  buf[0] = '\0';
  if (!v) return;
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 1e15)
      snprintf(buf, len, "%.0f", d);
    else
      snprintf(buf, len, "%.6g", d);
  } else if (cJSON_IsString(v)) {
    snprintf(buf, len, "%s", v->valuestring);
  } else {
    char *txt = jsonout_print(v);
    snprintf(buf, len, "%s", txt ? txt : "?");
    free(txt);
  }
}

/* The entries of obj after prefix (a nested object's keys as
 * "prefix.key", as a conditional space's option reads); -1 once one does
 * not fit. */
static int fmt_params_at(const cJSON *obj, const char *prefix, char *buf, size_t len,
                         size_t *used) {
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    char key[512], val[256];
    snprintf(key, sizeof key, "%s%s", prefix, it->string ? it->string : "?");
    if (cJSON_IsObject(it) && it->child) {
      char sub[sizeof key + 1];
      snprintf(sub, sizeof sub, "%s.", key);
      if (fmt_params_at(it, sub, buf, len, used)) return -1;
      continue;
    }
    report_fmt_value(it, val, sizeof(val));
    int n = snprintf(buf + *used, len - *used, "%s%s=%s", *used ? ", " : "", key, val);
    if (n < 0 || (size_t)n >= len - *used) {
      buf[*used] = '\0';
      return -1;
    }
    *used += (size_t)n;
  }
  return 0;
}

void report_fmt_params(const cJSON *obj, char *buf, size_t len) {
  size_t used = 0;
  if (!len) return;
  buf[0] = '\0';
  fmt_params_at(obj, "", buf, len, &used);
}

void report_fmt_reason(const char *reason, size_t cols, char *buf, size_t len) {
  if (!len) return;
  buf[0] = '\0';
  if (!reason) return;
  /* One line: the sentence never needs its newlines in a table cell. */
  size_t n = strcspn(reason, "\r\n");
  char *one = strndup(reason, n);
  if (!one) return;
  if (cols > 1 && text_width(one) > cols) {
    size_t keep = text_prefix_bytes(one, cols - 1);
    while (keep > 0 && one[keep - 1] == ' ') keep--; /* no "of 3 …" */
    snprintf(buf, len, "%.*s…", (int)keep, one);
  } else {
    snprintf(buf, len, "%s", one);
  }
  free(one);
}

void report_state_free(struct report_state *s) {
  cJSON_Delete(s->experiment);
  cJSON_Delete(s->trials_doc);
  cJSON_Delete(s->workers_doc);
  free(s->trials);
  memset(s, 0, sizeof(*s));
}

/* One row of the table from a trial object (its strings borrowed). */
static void load_trial(struct report_trial *r, const cJSON *t) {
  r->id = (long long)get_num(t, "id", 0);
  r->name = get_str(t, "name");
  r->status = get_str(t, "status");
  if (!r->status) r->status = "?";
  r->stopped_early = cJSON_IsTrue(get(t, "stopped_early"));
  r->config = get(t, "config");
  r->last_result = get(t, "last_result");
  if (!cJSON_IsObject(r->last_result)) r->last_result = NULL;
  r->iteration = (long long)get_num(t, "iteration", 0);
  r->total_time_s = get_num(r->last_result, "time_total_s", NAN);
  r->error = get_str(t, "error");
  r->pending_reason = get_str(t, "pending_reason");
  r->reason = get_str(t, "reason");
  r->exit_code = (long long)get_num(t, "exit_code", -1);
  r->infeasible = cJSON_IsFalse(get(t, "feasible"));
}

static void load_workers(struct report_state *s) {
  const cJSON *warr =
      cJSON_IsArray(s->workers_doc) ? s->workers_doc : get(s->workers_doc, "workers");
  if (!cJSON_IsArray(warr)) return;
  s->have_workers = 1;
  const cJSON *w;
  cJSON_ArrayForEach(w, warr) {
    const char *st = get_str(w, "status");
    if (st && strcmp(st, "alive")) continue;
    const cJSON *res = get(w, "resources"), *fr = get(w, "free");
    double cpu = get_num(res, "cpu", 0), gpu = get_num(res, "gpu", 0);
    s->workers_alive++;
    s->cpu_total += cpu;
    s->gpu_total += gpu;
    s->cpu_used += cpu - get_num(fr, "cpu", cpu);
    s->gpu_used += gpu - get_num(fr, "gpu", gpu);
  }
}

int report_state_load(struct report_state *s, cJSON *experiment, cJSON *trials, cJSON *workers) {
  memset(s, 0, sizeof(*s));
  s->experiment = experiment;
  s->trials_doc = trials;
  s->workers_doc = workers;
  s->last_seq = -1;
  if (!cJSON_IsObject(experiment)) goto bad;
  const cJSON *arr = cJSON_IsArray(trials) ? trials : get(trials, "trials");
  if (!cJSON_IsArray(arr)) goto bad;
  s->last_seq = (long long)get_num(trials, "last_seq", -1);
  int n = cJSON_GetArraySize(arr);
  if (n > 0) {
    s->trials = calloc((size_t)n, sizeof(*s->trials));
    if (!s->trials) {
      report_state_free(s);
      return -ENOMEM;
    }
  }
  const cJSON *t;
  cJSON_ArrayForEach(t, arr) {
    if (!cJSON_IsObject(t)) goto bad;
    load_trial(&s->trials[s->ntrials++], t);
  }
  load_workers(s);
  return 0;
bad:
  report_state_free(s);
  return -EINVAL;
}

int report_state_mergeable(const struct report_state *prev) {
  if (prev->last_seq < 0) return 0;
  /* A PENDING trial's pending_reason is worked out when it is read, with
   * no change of its own: only a whole list has it fresh. */
  for (size_t i = 0; i < prev->ntrials; i++)
    if (!strcmp(prev->trials[i].status, "PENDING")) return 0;
  return 1;
}

struct merge_item {
  long long id;
  cJSON *item;
};

static int cmp_merge_item(const void *a, const void *b) {
  long long x = ((const struct merge_item *)a)->id, y = ((const struct merge_item *)b)->id;
  return (x > y) - (x < y);
}

int report_state_merge(struct report_state *cur, struct report_state *prev, cJSON *experiment,
                       cJSON *changed, cJSON *workers) {
  memset(cur, 0, sizeof(*cur));
  cJSON *arr = cJSON_GetObjectItemCaseSensitive(changed, "trials"), *root = NULL, *all = NULL, *it;
  cJSON *parr = cJSON_IsArray(prev->trials_doc)
                    ? prev->trials_doc
                    : cJSON_GetObjectItemCaseSensitive(prev->trials_doc, "trials");
  struct merge_item *ch = NULL;
  struct report_trial *rows = NULL;
  int n = cJSON_GetArraySize(arr), rc = -EINVAL, k = 0;
  if (!cJSON_IsObject(experiment) || !cJSON_IsArray(arr) || !cJSON_IsArray(parr) ||
      (size_t)cJSON_GetArraySize(parr) != prev->ntrials)
    goto fail;
  if (n > 0 && !(ch = calloc((size_t)n, sizeof(*ch)))) goto nomem;
  if (prev->ntrials + (size_t)n > 0 && !(rows = calloc(prev->ntrials + (size_t)n, sizeof(*rows))))
    goto nomem;
  cJSON_ArrayForEach(it, arr) {
    const cJSON *id = get(it, "id");
    if (!cJSON_IsObject(it) || !cJSON_IsNumber(id)) goto fail;
    ch[k].id = (long long)id->valuedouble;
    ch[k++].item = it;
  }
  if (k) qsort(ch, (size_t)k, sizeof(*ch), cmp_merge_item);
  if (!(root = cJSON_CreateObject()) || !(all = cJSON_AddArrayToObject(root, "trials")) ||
      !cJSON_AddNumberToObject(root, "last_seq", get_num(changed, "last_seq", -1)))
    goto nomem;
  /* Nothing fails from here on: prev's unchanged trials move over with
   * their rows (prev->trials[i] is the i-th of its list); only the changed
   * ones are read. */
  size_t i = 0, j = 0;
  for (cJSON *p = parr->child, *next; p; p = next, i++) {
    next = p->next;
    struct merge_item key = {prev->trials[i].id, NULL}, *hit = NULL;
    if (k) hit = bsearch(&key, ch, (size_t)k, sizeof(*ch), cmp_merge_item);
    if (hit && hit->item) {
      load_trial(&rows[j++], hit->item);
      cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(arr, hit->item));
      hit->item = NULL;
    } else if (!hit) {
      rows[j++] = prev->trials[i];
      cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(parr, p));
    }
  }
  /* Trials made since: after the others, in the order they were made. */
  for (int c = 0; c < k; c++)
    if (ch[c].item && (c == 0 || ch[c].id != ch[c - 1].id)) {
      load_trial(&rows[j++], ch[c].item);
      cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(arr, ch[c].item));
    }
  free(ch);
  cJSON_Delete(changed);
  cur->experiment = experiment;
  cur->trials_doc = root;
  cur->workers_doc = workers;
  cur->trials = rows;
  cur->ntrials = j;
  cur->last_seq = (long long)get_num(root, "last_seq", -1);
  load_workers(cur);
  return 0;
nomem:
  rc = -ENOMEM;
fail:
  free(ch);
  free(rows);
  cJSON_Delete(root);
  cJSON_Delete(experiment);
  cJSON_Delete(changed);
  cJSON_Delete(workers);
  return rc;
}

static int status_rank(const char *st) {
  for (int i = 0; i < NSTATUS; i++)
    if (!strcmp(st, STATUS_ORDER[i])) return i;
  return NSTATUS; /* unknown statuses go last */
}

static const struct report_trial *find_trial(const struct report_state *s, long long id) {
  for (size_t i = 0; i < s->ntrials; i++)
    if (s->trials[i].id == id) return &s->trials[i];
  return NULL;
}

/* The trial that is not ERROR with the best finite last value of metric. */
static const struct report_trial *best_not_failed(const struct report_state *s, const char *metric,
                                                  const char *mode) {
  const struct report_trial *b = NULL;
  double bv = 0;
  int max = mode && !strcmp(mode, "max");
  for (size_t i = 0; metric && i < s->ntrials; i++) {
    const struct report_trial *t = &s->trials[i];
    const cJSON *v = get(t->last_result, metric);
    if ((t->status && !strcmp(t->status, "ERROR")) || !cJSON_IsNumber(v) ||
        !isfinite(v->valuedouble))
      continue;
    if (!b || (max ? v->valuedouble > bv : v->valuedouble < bv)) {
      b = t;
      bv = v->valuedouble;
    }
  }
  return b;
}

static const char *trial_label(const struct report_trial *t, char *buf, size_t len) {
  if (t->name) return t->name;
  snprintf(buf, len, "trial_%lld", t->id);
  return buf;
}

/* Appends text cut to width columns, then a newline. */
static void put_line(struct sbuf *sb, const char *text, int width) {
  size_t n = width > 0 ? text_prefix_bytes(text, (size_t)width) : strlen(text);
  sbuf_putn(sb, text, n);
  sbuf_putc(sb, '\n');
}

static void fmt_duration(double s, char *buf, size_t len) {
  if (!(s >= 0)) s = 0;
  long long cs = (long long)llround(s * 100.0);
  snprintf(buf, len, "%02lld:%02lld:%02lld.%02lld", cs / 360000, cs / 6000 % 60, cs / 100 % 60,
           cs % 100);
}

/* Names of the sampled params: param_space keys that are not constants. */
static void param_keys(const struct report_state *s, const char **keys, int *n, int cap) {
  const cJSON *space = get(get(s->experiment, "config"), "param_space");
  *n = 0;
  const cJSON *it;
  if (cJSON_IsObject(space)) {
    cJSON_ArrayForEach(it, space) {
      if ((cJSON_IsObject(it) || cJSON_IsArray(it)) && *n < cap) keys[(*n)++] = it->string;
    }
    return;
  }
  /* No config in the document: every key any trial's config has. */
  for (size_t i = 0; i < s->ntrials; i++) {
    cJSON_ArrayForEach(it, s->trials[i].config) {
      int seen = 0;
      for (int j = 0; j < *n; j++) seen |= !strcmp(keys[j], it->string);
      if (!seen && *n < cap) keys[(*n)++] = it->string;
    }
  }
}

static void add_key(const char **keys, int *n, int cap, const char *k) {
  for (int j = 0; j < *n; j++)
    if (!strcmp(keys[j], k)) return;
  if (*n < cap) keys[(*n)++] = k;
}

int report_fmt_preemptions(const cJSON *e, char *buf, size_t n) {
  const cJSON *p = get(e, "preemptions");
  double count = get_num(p, "count", 0);
  if (!(count > 0)) return 0;
  snprintf(buf, n, "preempted: %g time%s, %g iteration%s and %.1f s of work lost", count,
           count == 1 ? "" : "s", get_num(p, "lost_iterations", 0),
           get_num(p, "lost_iterations", 0) == 1 ? "" : "s", get_num(p, "lost_seconds", 0));
  return 1;
}

static void status_block(struct sbuf *sb, const struct report_state *s, double now, int width) {
  const cJSON *e = s->experiment;
  char line[2048], t1[64], t2[64];
  time_t secs = (time_t)floor(now);
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(t1, sizeof(t1), "%Y-%m-%d %H:%M:%S", &tm);
  double created = get_num(e, "created_at", now);
  double ended = get_num(e, "ended_at", NAN);
  fmt_duration((isnan(ended) ? now : ended) - created, t2, sizeof(t2));
  put_line(sb, "== Status ==", width);
  snprintf(line, sizeof(line), "Current time: %s UTC (running for %s)", t1, t2);
  put_line(sb, line, width);

  const char *status = report_exp_status(e);
  snprintf(line, sizeof(line), "Experiment %lld '%s': %s%s", (long long)get_num(e, "id", 0),
           get_str(e, "name") ? get_str(e, "name") : "?", status ? status : "?",
           report_exp_all_error(e) ? " (every trial ended in ERROR)" : "");
  const char *metric = get_str(e, "metric"), *mode = get_str(e, "mode");
  if (metric) {
    size_t u = strlen(line);
    snprintf(line + u, sizeof(line) - u, " (%s %s)",
             mode && !strcmp(mode, "max") ? "maximize" : "minimize", metric);
  }
  put_line(sb, line, width);
  /* Why it ended early (fail_fast, a cancel): docs/protocol.md#fail-fast. */
  if (get_str(e, "end_reason")) {
    snprintf(line, sizeof(line), "Ended: %s", get_str(e, "end_reason"));
    put_line(sb, line, width);
  }
  /* Preemptions are not failures: their count and the work they lost. */
  char pre[256];
  if (report_fmt_preemptions(e, pre, sizeof(pre))) {
    snprintf(line, sizeof(line), "Trials %s", pre);
    put_line(sb, line, width);
  }

  if (s->have_workers) {
    snprintf(line, sizeof(line), "Logical resource usage: %g/%g CPUs, %g/%g GPUs (%d worker%s)",
             s->cpu_used, s->cpu_total, s->gpu_used, s->gpu_total, s->workers_alive,
             s->workers_alive == 1 ? "" : "s");
    put_line(sb, line, width);
  }

  const cJSON *sc = get(e, "scheduler");
  const char *stype = get_str(sc, "type");
  if (stype && !strcmp(stype, "asha")) {
    const cJSON *brackets = get(sc, "brackets");
    long long stopped = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, brackets) stopped += (long long)get_num(b, "stopped", 0);
    snprintf(line, sizeof(line),
             "Scheduler: ASHA on %s, max_t=%g, grace_period=%g, reduction_factor=%g: %lld trial%s "
             "stopped early",
             get_str(sc, "time_attr") ? get_str(sc, "time_attr") : "training_iteration",
             get_num(sc, "max_t", 0), get_num(sc, "grace_period", 0),
             get_num(sc, "reduction_factor", 0), stopped, stopped == 1 ? "" : "s");
    put_line(sb, line, width);
    cJSON_ArrayForEach(b, brackets) {
      size_t u =
          (size_t)snprintf(line, sizeof(line), "  Bracket %lld (stopped %lld) cutoffs:",
                           (long long)get_num(b, "index", 0), (long long)get_num(b, "stopped", 0));
      const cJSON *m;
      int first = 1;
      cJSON_ArrayForEach(m, get(b, "milestones")) {
        char cut[64];
        const cJSON *c = get(m, "cutoff");
        if (cJSON_IsNumber(c))
          report_fmt_value(c, cut, sizeof(cut));
        else
          snprintf(cut, sizeof(cut), "-");
        if (u < sizeof(line))
          u += (size_t)snprintf(line + u, sizeof(line) - u, "%s iter %g: %s (n=%lld)",
                                first ? "" : " |", get_num(m, "t", 0), cut,
                                (long long)get_num(m, "recorded", 0));
        first = 0;
      }
      put_line(sb, line, width);
    }
  } else if (stype && !strcmp(stype, "fifo")) {
    put_line(sb, "Scheduler: FIFO (every trial runs to its end)", width);
  } else if (stype) {
    /* hyperband, pbt, median_stopping, promotion ASHA: the type
     * and the scalar settings of its state, whatever they are. */
    size_t u = (size_t)snprintf(line, sizeof(line), "Scheduler: %s", stype);
    const cJSON *it;
    int first = 1;
    cJSON_ArrayForEach(it, sc) {
      if (u >= sizeof(line) || !strcmp(it->string, "type") ||
          !(cJSON_IsNumber(it) || cJSON_IsString(it) || cJSON_IsBool(it)))
        continue;
      char v[128];
      if (cJSON_IsBool(it))
        snprintf(v, sizeof(v), "%s", cJSON_IsTrue(it) ? "true" : "false");
      else
        report_fmt_value(it, v, sizeof(v));
      u += (size_t)snprintf(line + u, sizeof(line) - u, "%s%s=%s", first ? " (" : ", ", it->string,
                            v);
      first = 0;
    }
    if (!first && u < sizeof(line)) snprintf(line + u, sizeof(line) - u, ")");
    put_line(sb, line, width);
  }
  /* Trials are created on demand: how far the searcher got. */
  const char *salg = get_str(e, "search_alg");
  if (salg || cJSON_IsNumber(get(e, "num_created"))) {
    snprintf(line, sizeof(line), "Search: %s, %lld of %lld trials created", salg ? salg : "random",
             (long long)get_num(e, "num_created", (double)s->ntrials),
             (long long)get_num(e, "num_trials", (double)s->ntrials));
    put_line(sb, line, width);
  }

  const cJSON *best = get(e, "best");
  long long bid = (long long)get_num(best, "trial_id", 0);
  const struct report_trial *bt = find_trial(s, bid);
  const cJSON *bval = get(best, "value");
  if (bt && bt->status && !strcmp(bt->status, "ERROR")) {
    /* The server's pick counts every trial's results: the best is never an
     * ERROR trial here, but the best of the others by their last result. */
    bt = best_not_failed(s, metric, mode);
    bval = bt ? get(bt->last_result, metric) : NULL;
  }
  if (cJSON_IsObject(best) && metric && bval) {
    char val[64], params[1024] = "", lbl[48];
    report_fmt_value(bval, val, sizeof(val));
    if (bt) {
      const char *keys[64];
      int nk;
      param_keys(s, keys, &nk, 64);
      size_t u = 0;
      for (int i = 0; i < nk && u < sizeof(params); i++) {
        char v[256];
        report_fmt_value(get(bt->config, keys[i]), v, sizeof(v));
        u += (size_t)snprintf(params + u, sizeof(params) - u, "%s%s=%s", i ? ", " : "", keys[i], v);
      }
    }
    snprintf(line, sizeof(line), "Current best trial: %s with %s=%s and params={%s}",
             bt ? trial_label(bt, lbl, sizeof(lbl)) : "?", metric, val, params);
    put_line(sb, line, width);
  }

  /* Counts by status in table order, from the trials we hold. */
  long long counts[NSTATUS + 1] = {0};
  for (size_t i = 0; i < s->ntrials; i++) counts[status_rank(s->trials[i].status)]++;
  size_t u = (size_t)snprintf(line, sizeof(line), "Number of trials: %zu (", s->ntrials);
  int first = 1;
  for (int i = 0; i <= NSTATUS; i++) {
    if (!counts[i]) continue;
    u += (size_t)snprintf(line + u, sizeof(line) - u, "%s%lld %s", first ? "" : ", ", counts[i],
                          i < NSTATUS ? STATUS_ORDER[i] : "OTHER");
    first = 0;
  }
  snprintf(line + u, sizeof(line) - u, ")");
  put_line(sb, line, width);
}

struct column {
  const char *title;
  int right; /* numbers are right-aligned */
  int prio;  /* lower is dropped first when the table is too wide */
  int hidden;
  size_t w;
  char **cells; /* one per shown row */
};

static int cmp_rows(const void *a, const void *b) {
  const struct report_trial *x = *(const struct report_trial *const *)a;
  const struct report_trial *y = *(const struct report_trial *const *)b;
  int rx = status_rank(x->status), ry = status_rank(y->status);
  if (rx != ry) return rx < ry ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

static void put_rule(struct sbuf *sb, const struct column *cols, int ncols, char edge, char mid) {
  sbuf_putc(sb, edge);
  int first = 1;
  for (int c = 0; c < ncols; c++) {
    if (cols[c].hidden) continue;
    if (!first) sbuf_putc(sb, mid);
    for (size_t i = 0; i < cols[c].w + 2; i++) sbuf_putc(sb, '-');
    first = 0;
  }
  sbuf_putc(sb, edge);
  sbuf_putc(sb, '\n');
}

static void put_cell(struct sbuf *sb, const char *text, size_t w, int right) {
  size_t tw = text_width(text);
  sbuf_putc(sb, ' ');
  if (right)
    for (size_t i = tw; i < w; i++) sbuf_putc(sb, ' ');
  sbuf_puts(sb, text);
  if (!right)
    for (size_t i = tw; i < w; i++) sbuf_putc(sb, ' ');
  sbuf_puts(sb, " |");
}

static void table(struct sbuf *sb, const struct report_state *s, int width, int max_rows) {
  enum { MAXK = 64 };
  const struct report_trial **rows = NULL;
  struct column cols[3 + 2 * MAXK + 3];
  int ncols = 0;
  size_t nrows = 0, shown_per[NSTATUS + 1] = {0}, total_per[NSTATUS + 1] = {0};
  memset(cols, 0, sizeof(cols));
  if (!s->ntrials) return;

  rows = malloc(s->ntrials * sizeof(*rows));
  if (!rows) {
    sb->err = -ENOMEM;
    return;
  }
  for (size_t i = 0; i < s->ntrials; i++) rows[i] = &s->trials[i];
  qsort(rows, s->ntrials, sizeof(*rows), cmp_rows);
  /* Keep the first rows in status order; count what does not fit. */
  for (size_t i = 0; i < s->ntrials; i++) {
    int r = status_rank(rows[i]->status);
    total_per[r]++;
    if (max_rows <= 0 || nrows < (size_t)max_rows) {
      rows[nrows++] = rows[i];
      shown_per[r]++;
    }
  }

  const cJSON *e = s->experiment;
  const char *metric = get_str(e, "metric");
  const char *time_attr = get_str(get(e, "scheduler"), "time_attr");
  const char *pkeys[MAXK], *mkeys[MAXK];
  int np, nm = 0;
  param_keys(s, pkeys, &np, MAXK);
  if (metric) add_key(mkeys, &nm, MAXK, metric);
  /* Metrics first, throughput and the like after them (and hidden first). */
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < nrows; i++) {
      const cJSON *it;
      cJSON_ArrayForEach(it, rows[i]->last_result) {
        if (cJSON_IsNumber(it) && !is_time_key(it->string, time_attr) &&
            is_minor_key(it->string) == pass)
          add_key(mkeys, &nm, MAXK, it->string);
      }
    }
  }

  /* The numeric id: what `ctune logs` and the REST API take besides the name. */
  cols[ncols++] = (struct column){.title = "id", .right = 1, .prio = 6};
  cols[ncols++] = (struct column){.title = "Trial name", .prio = 9};
  cols[ncols++] = (struct column){.title = "status", .prio = 9};
  for (int i = 0; i < np; i++)
    cols[ncols++] = (struct column){.title = pkeys[i], .right = 1, .prio = 2};
  cols[ncols++] = (struct column){.title = "iter", .right = 1, .prio = 4};
  cols[ncols++] = (struct column){.title = "total time (s)", .right = 1, .prio = 3};
  for (int i = 0; i < nm; i++)
    cols[ncols++] =
        (struct column){.title = mkeys[i], .right = 1, .prio = (metric && i == 0) ? 5 : 1};
  /* Why the scheduler last decided about the trial: only when a
   * shown row has one, so FIFO and stopping-ASHA tables keep their shape.
   * Dropped after the params, before the total time. */
  int reason_col = -1;
  for (size_t i = 0; i < nrows && reason_col < 0; i++)
    if (rows[i]->reason && *rows[i]->reason) reason_col = ncols;
  if (reason_col >= 0) cols[ncols++] = (struct column){.title = "reason", .prio = 3};

  for (int c = 0; c < ncols; c++) {
    cols[c].cells = calloc(nrows ? nrows : 1, sizeof(char *));
    if (!cols[c].cells) {
      sb->err = -ENOMEM;
      goto done;
    }
    cols[c].w = text_width(cols[c].title);
  }
  int np0 = 3, nit = 3 + np;
  for (size_t r = 0; r < nrows; r++) {
    const struct report_trial *t = rows[r];
    for (int c = 0; c < ncols; c++) {
      char buf[256], lbl[48];
      buf[0] = '\0';
      if (c == 0) {
        snprintf(buf, sizeof(buf), "%lld", t->id);
      } else if (c == 1) {
        snprintf(buf, sizeof(buf), "%s", trial_label(t, lbl, sizeof(lbl)));
      } else if (c == 2) {
        /* Outcome constraints: a trial that violates one is never the best. */
        snprintf(buf, sizeof(buf), "%s%s", t->status, t->infeasible ? " infeasible" : "");
      } else if (c < nit) {
        report_fmt_value(get(t->config, pkeys[c - np0]), buf, sizeof(buf));
      } else if (c == nit) {
        if (t->iteration > 0 || t->last_result) snprintf(buf, sizeof(buf), "%lld", t->iteration);
      } else if (c == nit + 1) {
        if (!isnan(t->total_time_s)) snprintf(buf, sizeof(buf), "%.1f", t->total_time_s);
      } else if (c == reason_col) {
        if (t->reason) report_fmt_reason(t->reason, REPORT_REASON_COLS, buf, sizeof(buf));
      } else {
        report_fmt_value(get(t->last_result, mkeys[c - nit - 2]), buf, sizeof(buf));
      }
      cols[c].cells[r] = strdup(buf);
      if (!cols[c].cells[r]) {
        sb->err = -ENOMEM;
        goto done;
      }
      size_t w = text_width(buf);
      if (w > cols[c].w) cols[c].w = w;
    }
  }

  /* Narrow terminals: drop the least useful columns, rightmost first. */
  int hidden = 0;
  for (;;) {
    size_t total = 1;
    for (int c = 0; c < ncols; c++)
      if (!cols[c].hidden) total += cols[c].w + 3;
    if (width <= 0 || total <= (size_t)width) break;
    int drop = -1;
    for (int c = 0; c < ncols; c++)
      if (!cols[c].hidden && cols[c].prio < 9 && (drop < 0 || cols[c].prio <= cols[drop].prio))
        drop = c;
    if (drop < 0) break;
    /* The reason shrinks to what is left (down to 20 columns) before it goes. */
    size_t excess = total - (size_t)width;
    if (drop == reason_col && cols[drop].w > 20 && cols[drop].w - 20 >= excess) {
      size_t w = cols[drop].w - excess;
      for (size_t r = 0; r < nrows; r++) {
        if (!rows[r]->reason) continue;
        char buf[256];
        report_fmt_reason(rows[r]->reason, w, buf, sizeof(buf));
        char *cut = strdup(buf);
        if (!cut) {
          sb->err = -ENOMEM;
          goto done;
        }
        free(cols[drop].cells[r]);
        cols[drop].cells[r] = cut;
      }
      cols[drop].w = w;
      continue;
    }
    cols[drop].hidden = 1;
    hidden++;
  }

  /* Rows are built whole, then cut to the width like every other line. */
  struct sbuf ln;
  sbuf_init(&ln);
  put_rule(&ln, cols, ncols, '+', '+');
  sbuf_putc(&ln, '|');
  for (int c = 0; c < ncols; c++)
    if (!cols[c].hidden) put_cell(&ln, cols[c].title, cols[c].w, cols[c].right);
  sbuf_putc(&ln, '\n');
  put_rule(&ln, cols, ncols, '|', '+');
  for (size_t r = 0; r < nrows; r++) {
    sbuf_putc(&ln, '|');
    for (int c = 0; c < ncols; c++)
      if (!cols[c].hidden) put_cell(&ln, cols[c].cells[r], cols[c].w, cols[c].right);
    sbuf_putc(&ln, '\n');
  }
  put_rule(&ln, cols, ncols, '+', '+');
  char *text;
  if (sbuf_take(&ln, &text)) {
    sb->err = -ENOMEM;
    goto done;
  }
  for (char *p = text, *nl; *p; p = nl + 1) {
    nl = strchr(p, '\n');
    *nl = '\0';
    put_line(sb, p, width);
  }
  free(text);
  for (int i = 0; i <= NSTATUS; i++) {
    if (total_per[i] > shown_per[i]) {
      char line[96];
      snprintf(line, sizeof(line), "… %zu more %s", total_per[i] - shown_per[i],
               i < NSTATUS ? STATUS_ORDER[i] : "OTHER");
      put_line(sb, line, width);
    }
  }
  if (hidden) {
    char line[1024];
    size_t u =
        (size_t)snprintf(line, sizeof(line), "(%d column%s hidden to fit %d columns:", hidden,
                         hidden == 1 ? "" : "s", width);
    for (int c = 0; c < ncols && u < sizeof(line); c++)
      if (cols[c].hidden) u += (size_t)snprintf(line + u, sizeof(line) - u, " %s", cols[c].title);
    if (u < sizeof(line)) snprintf(line + u, sizeof(line) - u, ")");
    put_line(sb, line, width);
  }
done:
  for (int c = 0; c < ncols; c++) {
    if (!cols[c].cells) continue;
    for (size_t r = 0; r < nrows; r++) free(cols[c].cells[r]);
    free(cols[c].cells);
  }
  free(rows);
}

/* The most useful line of a trial's error text: the trainer's JSON error
 * line ({"error": {"code", "message"}}) when there is one, else the last
 * non-empty line (the text ends with the trial's last stderr lines). */
static void error_line(const char *err, char *buf, size_t len) {
  const char *last = NULL;
  size_t last_n = 0;
  buf[0] = '\0';
  for (const char *p = err; *p;) {
    size_t n = strcspn(p, "\n");
    if (n > 0 && p[0] == '{') {
      char *copy = strndup(p, n);
      cJSON *doc = copy ? cJSON_Parse(copy) : NULL;
      const cJSON *e = get(doc, "error");
      const char *code = get_str(e, "code"), *msg = get_str(e, "message");
      if (msg) snprintf(buf, len, "%s%s%s", code ? code : "", code ? ": " : "", msg);
      cJSON_Delete(doc);
      free(copy);
      if (msg) {
        text_strip_controls(buf);
        return;
      }
    }
    if (n > 0) {
      last = p;
      last_n = n;
    }
    p += n;
    if (*p == '\n') p++;
  }
  if (last) snprintf(buf, len, "%.*s", (int)last_n, last);
  /* A trial's stderr: printed, never obeyed by the terminal; one line. */
  text_strip_controls(buf);
  for (char *p = buf; (p = strchr(p, '\n'));) *p = ' ';
}

/* Why trials wait and why they failed: the first few, one line each. */
static void notes(struct sbuf *sb, const struct report_state *s, int width) {
  const char *reason = NULL;
  size_t waiting = 0, shown_errors = 0;
  for (size_t i = 0; i < s->ntrials; i++) {
    const struct report_trial *t = &s->trials[i];
    if (!strcmp(t->status, "PENDING") && t->pending_reason) {
      if (!reason) reason = t->pending_reason;
      if (!strcmp(reason, t->pending_reason)) waiting++;
    }
  }
  char line[1024], lbl[48];
  if (reason) {
    snprintf(line, sizeof(line), "Pending: %s (%zu trial%s)", reason, waiting,
             waiting == 1 ? "" : "s");
    put_line(sb, line, width);
  }
  for (size_t i = 0; i < s->ntrials; i++) {
    const struct report_trial *t = &s->trials[i];
    if (strcmp(t->status, "ERROR")) continue;
    if (shown_errors++ == 3) break;
    char err[512];
    error_line(t->error ? t->error : "no message", err, sizeof(err));
    if (t->exit_code >= 0)
      snprintf(line, sizeof(line), "Error: %s (exit code %lld): %s",
               trial_label(t, lbl, sizeof(lbl)), t->exit_code, err);
    else
      snprintf(line, sizeof(line), "Error: %s: %s", trial_label(t, lbl, sizeof(lbl)), err);
    put_line(sb, line, width);
  }
}

int report_render(const struct report_state *s, double now, int width, int max_rows, char **out) {
  struct sbuf sb;
  sbuf_init(&sb);
  status_block(&sb, s, now, width);
  table(&sb, s, width, max_rows);
  notes(&sb, s, width);
  return sbuf_take(&sb, out);
}

int report_render_table(const struct report_state *s, int width, int max_rows, char **out) {
  struct sbuf sb;
  sbuf_init(&sb);
  table(&sb, s, width, max_rows);
  notes(&sb, s, width);
  return sbuf_take(&sb, out);
}

/* "loss=0.31, accuracy=0.88": the metric first, then the other metrics. */
static void fmt_metrics(const struct report_state *s, const struct report_trial *t, char *buf,
                        size_t len) {
  const char *metric = get_str(s->experiment, "metric");
  const char *time_attr = get_str(get(s->experiment, "scheduler"), "time_attr");
  size_t u = 0;
  buf[0] = '\0';
  if (metric && get(t->last_result, metric)) {
    char v[64];
    report_fmt_value(get(t->last_result, metric), v, sizeof(v));
    u += (size_t)snprintf(buf, len, "%s=%s", metric, v);
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, t->last_result) {
    if (u >= len) break;
    if (!cJSON_IsNumber(it) || is_time_key(it->string, time_attr) ||
        (metric && !strcmp(it->string, metric)) || !strcmp(it->string, "samples_per_s"))
      continue;
    char v[64];
    report_fmt_value(it, v, sizeof(v));
    u += (size_t)snprintf(buf + u, len - u, "%s%s=%s", u ? ", " : "", it->string, v);
  }
}

static int cmp_id(const void *a, const void *b) {
  const struct report_trial *x = *(const struct report_trial *const *)a;
  const struct report_trial *y = *(const struct report_trial *const *)b;
  return (x->id > y->id) - (x->id < y->id);
}

int report_events(const struct report_state *prev, const struct report_state *cur, char **out) {
  struct sbuf sb;
  sbuf_init(&sb);
  const struct report_trial **old = NULL;
  if (!prev) return sbuf_take(&sb, out);
  if (prev->ntrials) {
    old = malloc(prev->ntrials * sizeof(*old));
    if (!old) return -ENOMEM;
    for (size_t i = 0; i < prev->ntrials; i++) old[i] = &prev->trials[i];
    qsort(old, prev->ntrials, sizeof(*old), cmp_id);
  }
  for (size_t i = 0; i < cur->ntrials; i++) {
    const struct report_trial *t = &cur->trials[i], *p = NULL;
    if (old) {
      const struct report_trial *key = t;
      const struct report_trial **hit = bsearch(&key, old, prev->ntrials, sizeof(*old), cmp_id);
      if (hit) p = *hit;
    }
    const char *was = p ? p->status : "PENDING";
    /* A new decision: its sentence ends the line that reports
     * the change; one that changed nothing visible between two polls (a PBT
     * exploit that went RUNNING → PENDING → RUNNING) gets a line of its own. */
    const char *why =
        (t->reason && *t->reason && (!p || !p->reason || strcmp(p->reason, t->reason))) ? t->reason
                                                                                        : NULL;
    char lbl[48], m[512], cfg[512], tail[300] = "";
    const char *name = trial_label(t, lbl, sizeof(lbl));
    if (why) {
      char one[280];
      report_fmt_reason(why, 0, one, sizeof(one));
      snprintf(tail, sizeof(tail), " — %s", one);
    }
    if (!strcmp(was, t->status)) {
      if (why) sbuf_printf(&sb, "Trial %s at iteration %lld%s\n", name, t->iteration, tail);
      continue;
    }
    /* A trial can start and end between two polls: say both. */
    int ended = !strcmp(t->status, "TERMINATED") || !strcmp(t->status, "ERROR");
    int was_waiting = !strcmp(was, "PENDING") || !strcmp(was, "PAUSED");
    int said = 0;
    /* It ran between the polls only if it got further: a PAUSED trial that
     * its scheduler stopped (HyperBand's halving) never ran again. */
    int ran = !p || t->iteration > p->iteration;
    if (!strcmp(t->status, "RUNNING") || (ended && was_waiting && t->last_result && ran)) {
      report_fmt_params(t->config, cfg, sizeof(cfg));
      /* Resumed: it had made progress before it went back to waiting. The
       * decision that resumed it (a promotion) goes on this line unless the
       * trial has ended since: then the end line carries the newest one. */
      const char *rt = ended ? "" : tail;
      if (p && p->iteration > 0)
        sbuf_printf(&sb, "Trial %s resumed at iteration %lld with config {%s}%s\n", name,
                    p->iteration, cfg, rt);
      else
        sbuf_printf(&sb, "Trial %s started with config {%s}%s\n", name, cfg, rt);
      said = !ended;
    }
    if (!strcmp(t->status, "RUNNING")) {
      /* said above */
    } else if (!strcmp(t->status, "TERMINATED")) {
      fmt_metrics(cur, t, m, sizeof(m));
      if (t->stopped_early)
        sbuf_printf(&sb, "Trial %s stopped early by the scheduler at iteration %lld: %s%s\n", name,
                    t->iteration, m, tail);
      else
        sbuf_printf(&sb, "Trial %s completed after %lld iteration%s: %s%s\n", name, t->iteration,
                    t->iteration == 1 ? "" : "s", m, tail);
    } else if (!strcmp(t->status, "ERROR")) {
      char err[512];
      error_line(t->error ? t->error : "no message", err, sizeof(err));
      sbuf_printf(&sb, "Trial %s errored at iteration %lld: %s\n", name, t->iteration, err);
    } else if (!strcmp(t->status, "PENDING") && p) {
      sbuf_printf(&sb, "Trial %s is pending again (was %s)%s\n", name, p->status, said ? "" : tail);
    } else if (!strcmp(t->status, "PAUSED")) {
      sbuf_printf(&sb, "Trial %s paused at iteration %lld%s\n", name, t->iteration,
                  said ? "" : tail);
    }
  }
  free(old);
  return sbuf_take(&sb, out);
}

const struct report_state *report_events_base(int from_start) {
  static const struct report_state nothing_seen;
  return from_start ? &nothing_seen : NULL;
}

static cJSON *dup_or_null(const cJSON *v) { return v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull(); }

cJSON *report_to_json(const struct report_state *s, double now) {
  const cJSON *e = s->experiment;
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  int ok = 1;
  cJSON *ex = cJSON_AddObjectToObject(root, "experiment");
  ok &= cJSON_AddNumberToObject(root, "time", now) != NULL;
  if (ex) {
    double created = get_num(e, "created_at", now), ended = get_num(e, "ended_at", NAN);
    ok &= cJSON_AddNumberToObject(ex, "id", get_num(e, "id", 0)) != NULL;
    ok &= cJSON_AddItemToObject(ex, "name", dup_or_null(get(e, "name")));
    ok &= cJSON_AddItemToObject(ex, "status", dup_or_null(get(e, "status")));
    ok &= cJSON_AddItemToObject(ex, "metric", dup_or_null(get(e, "metric")));
    ok &= cJSON_AddItemToObject(ex, "mode", dup_or_null(get(e, "mode")));
    ok &= cJSON_AddNumberToObject(ex, "running_s", (isnan(ended) ? now : ended) - created) != NULL;
    ok &= cJSON_AddItemToObject(ex, "counts", dup_or_null(get(e, "counts")));
  } else {
    ok = 0;
  }
  cJSON *res = cJSON_AddObjectToObject(root, "resources");
  if (res && s->have_workers) {
    ok &= cJSON_AddNumberToObject(res, "workers", s->workers_alive) != NULL;
    ok &= cJSON_AddNumberToObject(res, "cpu_used", s->cpu_used) != NULL;
    ok &= cJSON_AddNumberToObject(res, "cpu_total", s->cpu_total) != NULL;
    ok &= cJSON_AddNumberToObject(res, "gpu_used", s->gpu_used) != NULL;
    ok &= cJSON_AddNumberToObject(res, "gpu_total", s->gpu_total) != NULL;
  } else if (!res) {
    ok = 0;
  }
  ok &= cJSON_AddItemToObject(root, "scheduler", dup_or_null(get(e, "scheduler")));
  ok &= cJSON_AddItemToObject(root, "best", dup_or_null(get(e, "best")));
  cJSON *arr = cJSON_AddArrayToObject(root, "trials");
  if (!arr) ok = 0;
  for (size_t i = 0; ok && i < s->ntrials; i++) {
    const struct report_trial *t = &s->trials[i];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o)) {
      cJSON_Delete(o);
      ok = 0;
      break;
    }
    ok &= cJSON_AddNumberToObject(o, "id", (double)t->id) != NULL;
    ok &= cJSON_AddItemToObject(o, "name",
                                t->name ? cJSON_CreateString(t->name) : cJSON_CreateNull());
    ok &= cJSON_AddStringToObject(o, "status", t->status) != NULL;
    ok &= cJSON_AddBoolToObject(o, "stopped_early", t->stopped_early) != NULL;
    ok &= cJSON_AddNumberToObject(o, "iteration", (double)t->iteration) != NULL;
    ok &= cJSON_AddItemToObject(o, "total_time_s",
                                isnan(t->total_time_s) ? cJSON_CreateNull()
                                                       : cJSON_CreateNumber(t->total_time_s));
    ok &= cJSON_AddItemToObject(o, "reason",
                                t->reason ? cJSON_CreateString(t->reason) : cJSON_CreateNull());
    ok &= cJSON_AddItemToObject(o, "config", dup_or_null(t->config));
    ok &= cJSON_AddItemToObject(o, "last_result", dup_or_null(t->last_result));
  }
  if (!ok) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

/* The name of trial `id` in an experiment's trial list, or NULL. */
static const char *name_of(const cJSON *trials, long long id) {
  const cJSON *arr = cJSON_IsArray(trials) ? trials : get(trials, "trials");
  const cJSON *t;
  cJSON_ArrayForEach(t, arr) {
    if ((long long)get_num(t, "id", 0) == id) return get_str(t, "name");
  }
  return NULL;
}

void report_fmt_event(const cJSON *ev, const cJSON *trials, char *buf, size_t len) {
  if (!len) return;
  buf[0] = '\0';
  const char *kind = get_str(ev, "kind"), *reason = get_str(ev, "reason");
  const cJSON *data = get(ev, "data");
  const cJSON *oldc = get(data, "old_config"), *newc = get(data, "new_config");
  if (kind && !strcmp(kind, "exploited") && cJSON_IsNumber(get(data, "donor")) &&
      cJSON_IsObject(newc)) {
    /* Built from the data, not the sentence: the sentence is cut at 255
     * bytes, the data names every key that changed. */
    long long donor = (long long)get_num(data, "donor", 0);
    const char *dname = name_of(trials, donor);
    char t[64] = "";
    if (cJSON_IsNumber(get(data, "t"))) {
      char v[48];
      report_fmt_value(get(data, "t"), v, sizeof(v));
      snprintf(t, sizeof(t), "t=%s ", v);
    }
    size_t u = (size_t)snprintf(buf, len, "%sexploited trial %lld%s%s%s", t, donor,
                                dname ? " (" : "", dname ? dname : "", dname ? ")" : "");
    int first = 1;
    const cJSON *it;
    cJSON_ArrayForEach(it, newc) {
      if (u >= len) break;
      char a[128], b[128];
      const cJSON *was = get(oldc, it->string);
      report_fmt_value(was, a, sizeof(a));
      report_fmt_value(it, b, sizeof(b));
      if (was && !strcmp(a, b)) continue;
      u += (size_t)snprintf(buf + u, len - u, "%s%s %s → %s", first ? ": " : ", ", it->string,
                            was ? a : "?", b);
      first = 0;
    }
    if (first && u < len) snprintf(buf + u, len - u, " (same config)");
    return;
  }
  if (reason)
    report_fmt_reason(reason, 0, buf, len);
  else
    snprintf(buf, len, "%s", kind ? kind : "?");
}

static void fmt_utc(double t, char *buf, size_t len) {
  time_t secs = (time_t)floor(t);
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

int report_trial_detail(const cJSON *trial, const cJSON *experiment, const cJSON *trials,
                        char **out) {
  if (!cJSON_IsObject(trial)) return -EINVAL;
  struct sbuf sb;
  sbuf_init(&sb);
  char line[2048];
  const char *name = get_str(trial, "name"), *status = get_str(trial, "status");
  long long id = (long long)get_num(trial, "id", 0);
  long long eid = (long long)get_num(trial, "experiment_id", 0);
  const char *ename = get_str(experiment, "name");
  sbuf_printf(&sb, "Trial %s (id %lld) of experiment %lld%s%s%s: %s%s\n", name ? name : "?", id,
              eid, ename ? " '" : "", ename ? ename : "", ename ? "'" : "", status ? status : "?",
              cJSON_IsTrue(get(trial, "stopped_early")) ? " (stopped early)" : "");
  sbuf_printf(&sb, "Iteration: %lld\n", (long long)get_num(trial, "iteration", 0));
  const char *reason = get_str(trial, "reason");
  if (reason) {
    report_fmt_reason(reason, 0, line, sizeof(line));
    sbuf_printf(&sb, "Reason: %s\n", line);
  }
  if (get_str(trial, "pending_reason"))
    sbuf_printf(&sb, "Waiting because: %s\n", get_str(trial, "pending_reason"));
  if (cJSON_IsNumber(get(trial, "worker_id")))
    sbuf_printf(&sb, "Worker: %lld\n", (long long)get_num(trial, "worker_id", 0));
  report_fmt_params(get(trial, "config"), line, sizeof(line));
  sbuf_printf(&sb, "Config: {%s}\n", line);
  const cJSON *last = get(trial, "last_result");
  if (cJSON_IsObject(last)) {
    report_fmt_params(last, line, sizeof(line));
    sbuf_printf(&sb, "Last result: {%s}\n", line);
  }
  /* Outcome constraints, at its last result (an older server: no key). */
  const cJSON *feas = get(trial, "feasible"), *viol = get(trial, "violation");
  if (cJSON_IsTrue(feas)) {
    sbuf_puts(&sb, "Feasible: yes (meets every constraint)\n");
  } else if (cJSON_IsFalse(feas)) {
    if (cJSON_IsNumber(viol))
      sbuf_printf(&sb, "Feasible: no (total violation %.6g)\n", viol->valuedouble);
    else
      sbuf_puts(&sb, "Feasible: no (a constrained metric is missing or not a number)\n");
  }
  if (get_str(trial, "error")) {
    error_line(get_str(trial, "error"), line, sizeof(line));
    sbuf_printf(&sb, "Error: %s\n", line);
  }
  /* docs/scheduling.md#failures-told-apart: who its last failure is on. */
  const char *attr = get_str(trial, "attribution");
  if (attr && attr[0] && strspn(attr, "abcdefghijklmnopqrstuvwxyz_") == strlen(attr))
    sbuf_printf(&sb, "Attribution: %s\n", attr);
  /* Its decisions ("events") and its attempts ("attempts": leases, lost
   * workers, releases, failures) as one history, in seq order. */
  const cJSON *events = get(trial, "events"), *attempts = get(trial, "attempts");
  int ne = cJSON_IsArray(events) ? cJSON_GetArraySize(events) : 0;
  int na = cJSON_IsArray(attempts) ? cJSON_GetArraySize(attempts) : 0;
  if (!cJSON_IsArray(events) && !cJSON_IsArray(attempts)) {
    /* An older server sends no history (no "events" key). */
  } else if (!ne && !na) {
    sbuf_puts(&sb, "Events: none\n");
  } else {
    sbuf_printf(&sb, "Events (%d, times in UTC):\n", ne + na);
    const cJSON *ev = ne ? events->child : NULL, *at = na ? attempts->child : NULL;
    while (ev || at) {
      const cJSON *x;
      if (!at || (ev && get_num(ev, "seq", 0) <= get_num(at, "seq", 0))) {
        x = ev;
        ev = ev->next;
      } else {
        x = at;
        at = at->next;
      }
      char when[32] = "", what[1024];
      if (cJSON_IsNumber(get(x, "time"))) fmt_utc(get_num(x, "time", 0), when, sizeof(when));
      report_fmt_event(x, trials, what, sizeof(what));
      const char *kind = get_str(x, "kind");
      sbuf_printf(&sb, "  %-19s  %-11s %s\n", when, kind ? kind : "?", what);
    }
  }
  return sbuf_take(&sb, out);
}

int report_exp_all_error(const cJSON *e) {
  const char *status = get_str(e, "status");
  const cJSON *counts = get(e, "counts");
  if (!status || strcmp(status, "TERMINATED") || !cJSON_IsObject(counts)) return 0;
  double errors = 0, others = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, counts) {
    if (!cJSON_IsNumber(c) || !c->string) continue;
    if (!strcmp(c->string, "ERROR"))
      errors += c->valuedouble;
    else
      others += c->valuedouble;
  }
  return errors > 0 && others == 0;
}

const char *report_exp_status(const cJSON *e) {
  return report_exp_all_error(e) ? "FAILED" : get_str(e, "status");
}
