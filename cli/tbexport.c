/* tbexport: an experiment → TensorBoard scalars and HParams sessions. The
 * HParams messages are encoded by hand; field numbers from TensorBoard's
 * tensorboard/plugins/hparams/api.proto and plugin_data.proto and from
 * google/protobuf/struct.proto, noted at each use. */
#include "tbexport.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include "clock.h"
#include "exitcode.h"
#include "jsonout.h"
#include "tfevents.h"

/* tensorboard.plugins.hparams.metadata */
#define HP_PLUGIN "hparams"
#define HP_EXPERIMENT_TAG "_hparams_/experiment"
#define HP_START_TAG "_hparams_/session_start_info"
#define HP_END_TAG "_hparams_/session_end_info"

/* api.proto enums */
enum { DT_UNSET = 0, DT_STRING = 1, DT_BOOL = 2, DT_FLOAT64 = 3 };
enum { ST_UNKNOWN = 0, ST_SUCCESS = 1, ST_FAILURE = 2, ST_RUNNING = 3 };

static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* ---- names: an ordered set of strings ---------------------------------- */

struct names {
  char **s;
  size_t n, cap;
};

static long names_find(const struct names *ns, const char *s) {
  for (size_t i = 0; i < ns->n; i++)
    if (!strcmp(ns->s[i], s)) return (long)i;
  return -1;
}

/* The index of s, added when new; -ENOMEM. */
static long names_add(struct names *ns, const char *s) {
  long at = names_find(ns, s);
  if (at >= 0) return at;
  if (ns->n == ns->cap) {
    size_t cap = ns->cap ? ns->cap * 2 : 16;
    char **p = realloc(ns->s, cap * sizeof(*p));
    if (!p) return -ENOMEM;
    ns->s = p;
    ns->cap = cap;
  }
  char *copy = strdup(s);
  if (!copy) return -ENOMEM;
  ns->s[ns->n] = copy;
  return (long)ns->n++;
}

static void names_free(struct names *ns) {
  for (size_t i = 0; i < ns->n; i++) free(ns->s[i]);
  free(ns->s);
  memset(ns, 0, sizeof(*ns));
}

/* ---- flattening nested objects ----------------------------------------- */

typedef int (*leaf_fn)(void *ctx, const char *name, const cJSON *v);

/* Calls fn for every non-object value under o, named by its '/'-joined path. */
static int flatten(const cJSON *o, char *path, size_t len, size_t cap, leaf_fn fn, void *ctx) {
  const cJSON *it;
  cJSON_ArrayForEach(it, o) {
    if (!it->string) continue;
    int n = snprintf(path + len, cap - len, "%s%s", len ? "/" : "", it->string);
    if (n < 0 || (size_t)n >= cap - len) continue; /* absurdly deep: skipped */
    int rc =
        cJSON_IsObject(it) ? flatten(it, path, len + (size_t)n, cap, fn, ctx) : fn(ctx, path, it);
    path[len] = '\0';
    if (rc) return rc;
  }
  return 0;
}

static int flatten_obj(const cJSON *o, leaf_fn fn, void *ctx) {
  char path[1024] = "";
  return cJSON_IsObject(o) ? flatten(o, path, 0, sizeof(path), fn, ctx) : 0;
}

/* ---- hparams: every config key's type and domain ----------------------- */

enum { K_NUM = 1, K_STR = 2, K_BOOL = 4, K_OTHER = 8 };

struct hparams {
  struct names keys;
  int *kinds;         /* per key: K_* bits seen */
  double *lo, *hi;    /* numbers' range */
  struct names *strs; /* per key: distinct strings */
  size_t cap;
};

static int value_kind(const cJSON *v) {
  if (cJSON_IsNumber(v)) return K_NUM;
  if (cJSON_IsString(v)) return K_STR;
  if (cJSON_IsBool(v)) return K_BOOL;
  if (cJSON_IsNull(v)) return 0;
  return K_OTHER; /* arrays: shown as their JSON text */
}

static int hp_leaf(void *ctx, const char *name, const cJSON *v) {
  struct hparams *hp = ctx;
  int kind = value_kind(v);
  if (!kind) return 0;
  long i = names_add(&hp->keys, name);
  if (i < 0) return (int)i;
  if (hp->keys.n > hp->cap) {
    size_t cap = hp->keys.cap;
    int *k = realloc(hp->kinds, cap * sizeof(*k));
    if (k) hp->kinds = k;
    double *lo = realloc(hp->lo, cap * sizeof(*lo));
    if (lo) hp->lo = lo;
    double *hi = realloc(hp->hi, cap * sizeof(*hi));
    if (hi) hp->hi = hi;
    struct names *s = realloc(hp->strs, cap * sizeof(*s));
    if (s) hp->strs = s;
    if (!k || !lo || !hi || !s) return -ENOMEM;
    for (size_t j = hp->cap; j < cap; j++) {
      hp->kinds[j] = 0;
      hp->lo[j] = INFINITY;
      hp->hi[j] = -INFINITY;
      memset(&hp->strs[j], 0, sizeof(hp->strs[j]));
    }
    hp->cap = cap;
  }
  hp->kinds[i] |= kind;
  if (kind == K_NUM) {
    if (v->valuedouble < hp->lo[i]) hp->lo[i] = v->valuedouble;
    if (v->valuedouble > hp->hi[i]) hp->hi[i] = v->valuedouble;
  } else if (kind == K_STR) {
    long s = names_add(&hp->strs[i], v->valuestring);
    if (s < 0) return (int)s;
  }
  return 0;
}

static void hp_free(struct hparams *hp) {
  /* cap, not keys.n: after a failed growth keys may hold one more */
  for (size_t i = 0; i < hp->cap; i++) names_free(&hp->strs[i]);
  names_free(&hp->keys);
  free(hp->kinds);
  free(hp->lo);
  free(hp->hi);
  free(hp->strs);
}

/* google.protobuf.Value: number_value = 2, string_value = 3, bool_value = 4. */
static void put_value(struct sbuf *b, const cJSON *v) {
  if (cJSON_IsNumber(v)) {
    tfev_put_double(b, 2, v->valuedouble);
  } else if (cJSON_IsString(v)) {
    tfev_put_string(b, 3, v->valuestring);
  } else if (cJSON_IsBool(v)) {
    tfev_put_varint_field(b, 4, cJSON_IsTrue(v) ? 1 : 0);
  } else {
    char *t = jsonout_print(v);
    if (!t) {
      sbuf_fail(b, -ENOMEM);
      return;
    }
    tfev_put_string(b, 3, t);
    free(t);
  }
}

/* api.proto HParamInfo: name = 1, type = 4, domain_discrete = 5
 * (ListValue: values = 1), domain_interval = 6 (Interval: min_value = 1,
 * max_value = 2). */
static void put_hparam_info(struct sbuf *b, const struct hparams *hp, size_t i) {
  struct sbuf info, dom, one;
  sbuf_init(&info);
  sbuf_init(&dom);
  sbuf_init(&one);
  tfev_put_string(&info, 1, hp->keys.s[i]);
  switch (hp->kinds[i]) {
  case K_NUM:
    tfev_put_varint_field(&info, 4, DT_FLOAT64);
    tfev_put_double(&dom, 1, hp->lo[i]);
    tfev_put_double(&dom, 2, hp->hi[i]);
    tfev_put_msg(&info, 6, &dom);
    break;
  case K_STR:
    tfev_put_varint_field(&info, 4, DT_STRING);
    for (size_t s = 0; s < hp->strs[i].n; s++) {
      sbuf_reset(&one);
      tfev_put_string(&one, 3, hp->strs[i].s[s]);
      tfev_put_msg(&dom, 1, &one);
    }
    tfev_put_msg(&info, 5, &dom);
    break;
  case K_BOOL:
    tfev_put_varint_field(&info, 4, DT_BOOL);
    for (int v = 0; v < 2; v++) {
      sbuf_reset(&one);
      tfev_put_varint_field(&one, 4, (uint64_t)v);
      tfev_put_msg(&dom, 1, &one);
    }
    tfev_put_msg(&info, 5, &dom);
    break;
  default: /* arrays or mixed types: shown as text, no domain */
    tfev_put_varint_field(&info, 4, DT_STRING);
    break;
  }
  tfev_put_msg(b, 4, &info);
  sbuf_free(&info);
  sbuf_free(&dom);
  sbuf_free(&one);
}

/* ---- results grouped by trial ------------------------------------------ */

struct ref {
  double trial_id;
  size_t order;
  const cJSON *result;
};

static int cmp_ref(const void *a, const void *b) {
  const struct ref *x = a, *y = b;
  if (x->trial_id != y->trial_id) return x->trial_id < y->trial_id ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

/* ---- writing ----------------------------------------------------------- */

static const cJSON *trial_array(const cJSON *trials) {
  if (cJSON_IsArray(trials)) return trials;
  const cJSON *a = get(trials, "trials");
  return cJSON_IsArray(a) ? a : NULL;
}

static double num_or(const cJSON *v, double dflt) {
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* One Summary with one plugin value holding HParamsPluginData whose oneof
 * `field` (experiment = 2, session_start_info = 3, session_end_info = 4) is
 * msg; version = 1 stays 0 (PLUGIN_DATA_VERSION) and is not written. */
static int write_hparams(struct tfev_writer *w, double wall, const char *tag, unsigned field,
                         const struct sbuf *msg) {
  struct sbuf data, val, sum;
  sbuf_init(&data);
  sbuf_init(&val);
  sbuf_init(&sum);
  tfev_put_msg(&data, field, msg);
  tfev_value_plugin(&val, tag, HP_PLUGIN, &data);
  tfev_put_msg(&sum, 1, &val);
  int rc = sum.err ? sum.err : tfev_write_summary(w, wall, 0, &sum);
  sbuf_free(&data);
  sbuf_free(&val);
  sbuf_free(&sum);
  return rc;
}

/* plugin_data.proto SessionStartInfo: hparams = 1 (map<string, Value>:
 * entries {key = 1, value = 2}), group_name = 4, start_time_secs = 5. */
struct start_ctx {
  struct sbuf *b;
};

static int start_leaf(void *ctx, const char *name, const cJSON *v) {
  struct start_ctx *sc = ctx;
  if (!value_kind(v)) return 0;
  struct sbuf entry, val;
  sbuf_init(&entry);
  sbuf_init(&val);
  put_value(&val, v);
  tfev_put_string(&entry, 1, name);
  tfev_put_msg(&entry, 2, &val);
  tfev_put_msg(sc->b, 1, &entry);
  sbuf_free(&entry);
  sbuf_free(&val);
  return sc->b->err;
}

struct scalar_ctx {
  struct sbuf *sum;
  struct names *metrics;
  long long count;
};

static int scalar_leaf(void *ctx, const char *name, const cJSON *v) {
  struct scalar_ctx *sc = ctx;
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return 0;
  long i = names_add(sc->metrics, name);
  if (i < 0) return (int)i;
  struct sbuf val;
  sbuf_init(&val);
  tfev_value_scalar(&val, name, (float)v->valuedouble);
  tfev_put_msg(sc->sum, 1, &val);
  sbuf_free(&val);
  sc->count++;
  return sc->sum->err;
}

static int trial_status(const char *s) {
  if (!s) return ST_UNKNOWN;
  if (!strcmp(s, "TERMINATED")) return ST_SUCCESS;
  if (!strcmp(s, "ERROR")) return ST_FAILURE;
  if (!strcmp(s, "RUNNING") || !strcmp(s, "PENDING") || !strcmp(s, "PAUSED")) return ST_RUNNING;
  return ST_UNKNOWN;
}

/* A run folder name from the trial's name: no '/', no leading '.'. */
static void run_name(const cJSON *t, char *out, size_t cap) {
  const char *name = cJSON_GetStringValue(get(t, "name"));
  if (name && *name)
    snprintf(out, cap, "%s", name);
  else
    snprintf(out, cap, "trial_%.0f", num_or(get(t, "id"), 0));
  for (char *c = out; *c; c++)
    if (*c == '/' || *c == '\\' || (c == out && *c == '.')) *c = '_';
}

static int write_trial(const char *dir, const cJSON *t, const struct ref *refs, size_t nrefs,
                       const char *time_attr, struct names *metrics, struct tbexport_stats *st,
                       char *msg, size_t msglen) {
  char run[256], path[4096];
  struct tfev_writer *w = NULL;
  struct sbuf start, end, sum;
  sbuf_init(&start);
  sbuf_init(&end);
  sbuf_init(&sum);
  run_name(t, run, sizeof(run));
  snprintf(path, sizeof(path), "%s/%s", dir, run);
  double now = clock_wall_s();
  double started = num_or(get(t, "started_at"), num_or(get(t, "created_at"), now));
  int rc = tfev_open(&w, path, started);
  if (rc) {
    snprintf(msg, msglen, "cannot create an event file in %s: %s", path, strerror(-rc));
    goto done;
  }
  struct start_ctx sc = {&start};
  rc = flatten_obj(get(t, "config"), start_leaf, &sc);
  if (!rc) {
    tfev_put_double(&start, 5, started);
    rc = write_hparams(w, started, HP_START_TAG, 3, &start);
  }
  /* every result: one event, all its numbers at step = the time attribute */
  double id = num_or(get(t, "id"), 0);
  size_t lo = 0, hi = nrefs;
  while (lo < hi) { /* first ref with trial_id >= id */
    size_t mid = lo + (hi - lo) / 2;
    if (refs[mid].trial_id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  long long nth = 0;
  double last_wall = started;
  for (size_t i = lo; !rc && i < nrefs && refs[i].trial_id == id; i++) {
    const cJSON *r = refs[i].result;
    if (!cJSON_IsObject(r)) continue;
    nth++;
    const cJSON *tv = get(r, time_attr);
    int64_t step =
        cJSON_IsNumber(tv) && isfinite(tv->valuedouble) ? (int64_t)llround(tv->valuedouble) : nth;
    double wall = num_or(get(r, "timestamp"), last_wall);
    last_wall = wall;
    sbuf_reset(&sum);
    struct scalar_ctx c = {&sum, metrics, 0};
    rc = flatten_obj(r, scalar_leaf, &c);
    if (!rc && c.count) rc = tfev_write_summary(w, wall, step, &sum);
    st->scalars += c.count;
  }
  if (!rc) {
    /* SessionEndInfo: status = 1, end_time_secs = 2 */
    double ended = num_or(get(t, "ended_at"), last_wall);
    tfev_put_varint_field(&end, 1, (uint64_t)trial_status(cJSON_GetStringValue(get(t, "status"))));
    tfev_put_double(&end, 2, ended);
    rc = write_hparams(w, ended, HP_END_TAG, 4, &end);
  }
  if (rc && !msg[0]) snprintf(msg, msglen, "cannot write %s: %s", tfev_path(w), strerror(-rc));
  st->runs++;
done:;
  int crc = tfev_close(w);
  if (!rc && crc) {
    rc = crc;
    snprintf(msg, msglen, "cannot write the event file in %s: %s", path, strerror(-rc));
  }
  sbuf_free(&start);
  sbuf_free(&end);
  sbuf_free(&sum);
  return rc;
}

/* api.proto Experiment: description = 1, time_created_secs = 3,
 * hparam_infos = 4, metric_infos = 5 (MetricInfo: name = 1 (MetricName:
 * group = 1, tag = 2)), name = 6. Metrics are tags in each session's own
 * run (group ""). */
static int write_experiment(const char *dir, const cJSON *experiment, const struct hparams *hp,
                            const struct names *metrics, char *msg, size_t msglen) {
  struct tfev_writer *w = NULL;
  struct sbuf ex, mi, mn;
  sbuf_init(&ex);
  sbuf_init(&mi);
  sbuf_init(&mn);
  double created = num_or(get(experiment, "created_at"), clock_wall_s());
  const char *name = cJSON_GetStringValue(get(experiment, "name"));
  const char *metric = cJSON_GetStringValue(get(experiment, "metric"));
  const char *mode = cJSON_GetStringValue(get(experiment, "mode"));
  char desc[512];
  if (metric)
    snprintf(desc, sizeof(desc), "ctune experiment %.0f: %s %s", num_or(get(experiment, "id"), 0),
             mode ? mode : "", metric);
  else
    snprintf(desc, sizeof(desc), "ctune experiment %.0f", num_or(get(experiment, "id"), 0));
  tfev_put_string(&ex, 6, name ? name : "");
  tfev_put_string(&ex, 1, desc);
  tfev_put_double(&ex, 3, created);
  for (size_t i = 0; i < hp->keys.n; i++) put_hparam_info(&ex, hp, i);
  /* the experiment's metric first: the HParams table's first metric column */
  long first = metric ? names_find(metrics, metric) : -1;
  for (long k = -1; k < (long)metrics->n; k++) {
    long i = k < 0 ? first : k;
    if (i < 0 || (k >= 0 && k == first)) continue;
    sbuf_reset(&mn);
    sbuf_reset(&mi);
    tfev_put_string(&mn, 1, "");
    tfev_put_string(&mn, 2, metrics->s[i]);
    tfev_put_msg(&mi, 1, &mn);
    tfev_put_msg(&ex, 5, &mi);
  }
  int rc = ex.err;
  if (!rc) rc = tfev_open(&w, dir, created);
  if (!rc) rc = write_hparams(w, created, HP_EXPERIMENT_TAG, 2, &ex);
  int crc = tfev_close(w);
  if (!rc) rc = crc;
  if (rc)
    snprintf(msg, msglen, "cannot write the experiment's event file in %s: %s", dir, strerror(-rc));
  sbuf_free(&ex);
  sbuf_free(&mi);
  sbuf_free(&mn);
  return rc;
}

int tbexport_write(const char *dir, const cJSON *experiment, const cJSON *trials,
                   const cJSON *results, struct tbexport_stats *st, char *msg, size_t msglen) {
  const cJSON *arr = trial_array(trials);
  struct hparams hp;
  struct names metrics = {0};
  struct ref *refs = NULL;
  size_t nrefs = 0;
  int rc = 0;
  memset(&hp, 0, sizeof(hp));
  memset(st, 0, sizeof(*st));
  msg[0] = '\0';
  if (!arr || !cJSON_IsObject(experiment)) {
    snprintf(msg, msglen, "the experiment or its trial list has an unexpected shape");
    return -EINVAL;
  }
  const cJSON *sched = get(experiment, "scheduler");
  const char *time_attr = cJSON_GetStringValue(get(sched, "time_attr"));
  if (!time_attr) time_attr = cJSON_GetStringValue(get(get(experiment, "config"), "time_attr"));
  if (!time_attr) time_attr = "training_iteration";

  const cJSON *rarr = get(results, "results");
  int n = cJSON_GetArraySize(rarr);
  if (n > 0) {
    refs = malloc((size_t)n * sizeof(*refs));
    if (!refs) {
      rc = -ENOMEM;
      goto done;
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, rarr) {
      refs[nrefs] = (struct ref){num_or(get(r, "trial_id"), -1), nrefs, get(r, "result")};
      nrefs++;
    }
    qsort(refs, nrefs, sizeof(*refs), cmp_ref);
  }
  const cJSON *t;
  cJSON_ArrayForEach(t, arr) {
    if ((rc = flatten_obj(get(t, "config"), hp_leaf, &hp))) goto done;
  }
  cJSON_ArrayForEach(t, arr) {
    rc = write_trial(dir, t, refs, nrefs, time_attr, &metrics, st, msg, msglen);
    if (rc) goto done;
  }
  rc = write_experiment(dir, experiment, &hp, &metrics, msg, msglen);
done:
  if (rc == -ENOMEM && !msg[0]) snprintf(msg, msglen, "out of memory");
  free(refs);
  hp_free(&hp);
  names_free(&metrics);
  return rc;
}

int tbexport_cmd(const char *dir, const cJSON *experiment, const cJSON *trials,
                 const cJSON *results) {
  struct tbexport_stats st;
  char msg[512];
  if (!dir) {
    fprintf(stderr, "ctune: export --format tensorboard needs --output DIR (a folder; "
                    "it is created)\n");
    return CLI_EXIT_USAGE;
  }
  struct stat sb;
  if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "ctune: --output %s is a file; --format tensorboard writes a folder\n", dir);
    return CLI_EXIT_USAGE;
  }
  /* TensorBoard merges every file of a run: a second export into the same
   * folder would show every point twice */
  DIR *d = opendir(dir);
  if (d) {
    const struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    closedir(d);
    if (!empty) {
      fprintf(stderr,
              "ctune: --output %s is not empty: give a new folder (TensorBoard would "
              "merge an earlier export's points with these)\n",
              dir);
      return CLI_EXIT_ERROR;
    }
  }
  if (tbexport_write(dir, experiment, trials, results, &st, msg, sizeof(msg))) {
    fprintf(stderr, "ctune: %s\n", msg);
    return CLI_EXIT_ERROR;
  }
  printf("wrote %lld run%s (%lld scalars) and the HParams summary to %s\n"
         "view it with: tensorboard --logdir %s\n",
         st.runs, st.runs == 1 ? "" : "s", st.scalars, dir, dir);
  return CLI_EXIT_OK;
}
