/* watch: polls an experiment and shows the reporter — redrawn in place on a
 * terminal; otherwise a table every interval plus a line per trial event;
 * or JSON lines. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <pthread.h>

#include "cli.h"
#include "jsonout.h"
#include "clock.h"
#include "testhook.h"

/* The watch follows GET /api/v1/events on a second connection (a
 * thread) and fetches the experiment again only when something of it (or a
 * worker) changed; between changes it redraws what it has at the new time.
 * Where the stream is not there (an older server, a proxy that buffers, a
 * refused token) it fetches every second as before: the output is the same. */
struct watch_feed {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* urgent: the experiment itself changed (its end) */
  pthread_t th;
  int started, stop;
  int live;   /* the stream answered 200 and is open */
  int dirty;  /* a change since the last fetch (or the stream (re)opened) */
  int urgent; /* the experiment's own row changed: fetch now, not at the next second */
  int ended;  /* the stream said the experiment ended (or is gone) */
  long long exp_id;
  long long *trial_ids; /* the experiment's trials as of the last fetch, sorted */
  size_t ntrial_ids;
  char *url, *auth, *ca_file;
  char line[8192]; /* the SSE line being read */
  size_t nline;
  char event[32]; /* the frame's event: */
  int frame_relevant;
  int frame_urgent;
  /* The stream's socket while curl has it open, so that feed_stop can shut
   * it down: curl looks at the stop flag only in its progress callback,
   * about once a second on an idle stream, and `ctune run` would wait that
   * long after its experiment ended. -1 when none. */
  curl_socket_t sock;
};

static const char *json_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

/* Past the JSON string that starts at p (its '"'); NULL when unterminated. */
static const char *json_skip_string(const char *p) {
  for (p++; *p; p++) {
    if (*p == '\\' && !*++p) return NULL;
    if (*p == '"') return p + 1;
  }
  return NULL;
}

/* Past the member value at p: a string, an object or array with all it
 * holds, or a scalar up to the ',' or '}' after it. NULL when cut short. */
static const char *json_skip_value(const char *p) {
  for (int depth = 0; *p;) {
    if (*p == '"') {
      if (!(p = json_skip_string(p))) return NULL;
      if (!depth) return p;
      continue;
    }
    if (*p == '{' || *p == '[') {
      depth++;
    } else if (*p == '}' || *p == ']') {
      if (!depth) return p;
      if (!--depth) return p + 1;
    } else if (!depth && *p == ',') {
      return p;
    }
    p++;
  }
  return NULL;
}

const char *watch_json_member(const char *json, const char *key) {
  const char *p = json_ws(json);
  size_t kl = strlen(key);
  if (*p != '{') return NULL;
  for (p = json_ws(p + 1); *p == '"';) {
    const char *k = p + 1, *end = json_skip_string(p);
    if (!end) return NULL;
    int match = (size_t)(end - 1 - k) == kl && !memcmp(k, key, kl);
    p = json_ws(end);
    if (*p != ':') return NULL;
    p = json_ws(p + 1);
    if (match) return p;
    if (!(p = json_skip_value(p))) return NULL;
    p = json_ws(p);
    if (*p != ',') return NULL;
    p = json_ws(p + 1);
  }
  return NULL;
}

/* The frame's number under key, scanned in the text: 1 found, 0 it is no
 * number, -1 the scan cannot tell (then the caller parses). */
static int frame_number(const char *data, const char *key, long long *out) {
  const char *v = watch_json_member(data, key);
  if (!v) return -1;
  char *end = NULL;
  double x = strtod(v, &end);
  if (end == v)
    return *v == '"' || *v == '{' || *v == '[' || *v == 't' || *v == 'f' || *v == 'n' ? 0 : -1;
  end = (char *)json_ws(end);
  if (*end != ',' && *end != '}') return -1;
  *out = (long long)x;
  return 1;
}

/* Whether an experiment's status (the frame's "status" member) is still
 * under way; -1 when the scan cannot tell. */
static int frame_status_running(const char *data) {
  const char *v = watch_json_member(data, "status");
  if (!v || *v != '"') return -1;
  const char *end = strchr(v + 1, '"');
  if (!end || memchr(v + 1, '\\', (size_t)(end - v - 1))) return -1;
  size_t n = (size_t)(end - v - 1);
  return (n == 7 && !memcmp(v + 1, "RUNNING", 7)) || (n == 6 && !memcmp(v + 1, "PAUSED", 6));
}

int watch_frame_relevant(const char *event, const char *data, long long exp_id,
                         const long long *trial_ids, size_t ntrial_ids, int *urgent) {
  *urgent = 0;
  if (!strcmp(event, "worker") || !strcmp(event, "reset")) return 1;
  int is_exp = !strcmp(event, "experiment"), is_trial = !strcmp(event, "trial");
  const char *k = is_exp ? "id" : is_trial ? "experiment_id" : "trial_id";
  long long x = 0;
  /* The frame's text is scanned for the one member asked, not parsed: a
   * trial frame is a whole trial object, three of them a trial. */
  int have = frame_number(data, k, &x), running = is_exp ? frame_status_running(data) : 0;
  if (have < 0 || running < 0) {
    cJSON *d = cJSON_Parse(data);
    if (!d) return 1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, k);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(d, "status");
    have = cJSON_IsNumber(v);
    if (have) x = (long long)v->valuedouble;
    running = cJSON_IsString(st) &&
              (!strcmp(st->valuestring, "RUNNING") || !strcmp(st->valuestring, "PAUSED"));
    cJSON_Delete(d);
  }
  if (!have) return 1;
  if (!strcmp(event, "result")) {
    size_t lo = 0, hi = ntrial_ids;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (trial_ids[mid] == x) return 1;
      if (trial_ids[mid] < x)
        lo = mid + 1;
      else
        hi = mid;
    }
    return 0;
  }
  if (!is_trial && !is_exp) return 1;
  if (x != exp_id) return 0;
  /* Its end (or its deletion): the watch is over, now. */
  if (is_exp && !running) *urgent = 1;
  return 1;
}

/* One "data:" line of a frame: does it concern the watched experiment? */
static int feed_data_relevant(struct watch_feed *f, const char *data) {
  int urgent = 0;
  pthread_mutex_lock(&f->mu);
  int rel = watch_frame_relevant(f->event, data, f->exp_id, f->trial_ids, f->ntrial_ids, &urgent);
  pthread_mutex_unlock(&f->mu);
  if (urgent) f->frame_urgent = 1;
  return rel;
}

static void feed_line(struct watch_feed *f, const char *line) {
  if (!*line) { /* end of a frame */
    if (f->frame_relevant) {
      pthread_mutex_lock(&f->mu);
      f->dirty = 1;
      if (f->frame_urgent) {
        f->urgent = 1;
        f->ended = 1;
        pthread_cond_signal(&f->cv);
      }
      pthread_mutex_unlock(&f->mu);
    }
    f->frame_relevant = 0;
    f->frame_urgent = 0;
    f->event[0] = 0;
  } else if (!strncmp(line, "event:", 6)) {
    snprintf(f->event, sizeof(f->event), "%s", line + 6 + (line[6] == ' '));
  } else if (!strncmp(line, "data:", 5)) {
    if (feed_data_relevant(f, line + 5 + (line[5] == ' '))) f->frame_relevant = 1;
  }
}

static size_t feed_on_body(char *p, size_t sz, size_t n, void *arg) {
  struct watch_feed *f = arg;
  size_t len = sz * n;
  for (size_t i = 0; i < len; i++) {
    if (p[i] == '\n') {
      f->line[f->nline] = 0;
      if (f->nline && f->line[f->nline - 1] == '\r') f->line[f->nline - 1] = 0;
      feed_line(f, f->line);
      f->nline = 0;
    } else if (f->nline + 1 < sizeof(f->line)) {
      f->line[f->nline++] = p[i];
    } /* a longer line: the rest is dropped; its frame still counts as relevant */
    else
      f->frame_relevant = 1;
  }
  pthread_mutex_lock(&f->mu);
  int stop = f->stop;
  pthread_mutex_unlock(&f->mu);
  return stop ? 0 : len;
}

static size_t feed_on_header(char *p, size_t sz, size_t n, void *arg) {
  struct watch_feed *f = arg;
  size_t len = sz * n;
  if (len >= 12 && !strncmp(p, "HTTP/", 5)) {
    const char *sp = memchr(p, ' ', len);
    int ok = sp && (size_t)(sp - p) + 4 <= len && !strncmp(sp + 1, "200", 3);
    pthread_mutex_lock(&f->mu);
    f->live = ok;
    f->dirty = 1; /* anything may have changed before the stream opened */
    f->urgent = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
  }
  return len;
}

static int feed_on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  (void)a, (void)b, (void)c, (void)d;
  struct watch_feed *f = arg;
  pthread_mutex_lock(&f->mu);
  int stop = f->stop;
  pthread_mutex_unlock(&f->mu);
  return stop;
}

static int feed_on_sockopt(void *arg, curl_socket_t fd, curlsocktype purpose) {
  struct watch_feed *f = arg;
  (void)purpose;
  pthread_mutex_lock(&f->mu);
  f->sock = fd;
  pthread_mutex_unlock(&f->mu);
  return CURL_SOCKOPT_OK;
}

/* Forgotten before it is closed, so feed_stop never shuts down a number
 * that has meanwhile been reused. */
static int feed_on_close(void *arg, curl_socket_t fd) {
  struct watch_feed *f = arg;
  pthread_mutex_lock(&f->mu);
  if (f->sock == fd) f->sock = CURL_SOCKET_BAD;
  pthread_mutex_unlock(&f->mu);
  return close(fd);
}

static void *feed_main(void *arg) {
  struct watch_feed *f = arg;
  CURL *h = curl_easy_init();
  struct curl_slist *hdrs = NULL;
  if (f->auth) hdrs = curl_slist_append(hdrs, f->auth);
  hdrs = curl_slist_append(hdrs, "Accept: text/event-stream");
  for (int tries = 0; h && hdrs;) {
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, f->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, feed_on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, feed_on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, feed_on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, f);
    curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, feed_on_sockopt);
    curl_easy_setopt(h, CURLOPT_SOCKOPTDATA, f);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, feed_on_close);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, f);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    /* keepalives come every 15 s: silence for 40 s is a dead connection */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 40L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ctune-cli/0.1");
    if (f->ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, f->ca_file);
    f->nline = 0;
    f->frame_relevant = 0;
    curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    pthread_mutex_lock(&f->mu);
    f->live = 0;
    int stop = f->stop;
    pthread_mutex_unlock(&f->mu);
    /* Refused (no such route, no right): polling it is, for good. */
    if (stop || (status >= 400 && status < 500) || ++tries > 1000) break;
    for (int i = 0; i < 20 && !stop; i++) { /* 2 s, then reconnect */
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
      pthread_mutex_lock(&f->mu);
      stop = f->stop;
      pthread_mutex_unlock(&f->mu);
    }
    if (stop) break;
  }
  curl_slist_free_all(hdrs);
  if (h) curl_easy_cleanup(h);
  return NULL;
}

static void feed_start(struct watch_feed *f, struct http_client *c, long long id) {
  memset(f, 0, sizeof(*f));
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  f->sock = CURL_SOCKET_BAD;
  f->exp_id = id;
  size_t n = strlen(c->base) + 32;
  if (!(f->url = malloc(n))) return;
  snprintf(f->url, n, "%s/api/v1/events", c->base);
  if (c->auth_header && !(f->auth = strdup(c->auth_header))) return;
  if (c->ca_file && *c->ca_file && !(f->ca_file = strdup(c->ca_file))) return;
  if (getenv("CTUNE_WATCH_NO_EVENTS")) return; /* the old polling, for comparisons */
  f->started = pthread_create(&f->th, NULL, feed_main, f) == 0;
}

static void feed_stop(struct watch_feed *f) {
  pthread_mutex_lock(&f->mu);
  f->stop = 1;
  /* The read in flight ends at once (EOF), not at curl's next progress call. */
  if (f->sock != CURL_SOCKET_BAD) shutdown(f->sock, SHUT_RDWR);
  pthread_mutex_unlock(&f->mu);
  if (f->started) pthread_join(f->th, NULL);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f->url);
  free(f->auth);
  free(f->ca_file);
  free(f->trial_ids);
}

/* Whether to fetch now: no stream, or a change came; clears the change. */
static int feed_take(struct watch_feed *f) {
  pthread_mutex_lock(&f->mu);
  int fetch = !f->started || !f->live || f->dirty;
  f->dirty = 0;
  pthread_mutex_unlock(&f->mu);
  return fetch;
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

/* The experiment's trial ids, for telling its results from others'. */
static void feed_set_trials(struct watch_feed *f, const struct report_state *s) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(s->trials_doc, "trials"), *t;
  size_t n = (size_t)cJSON_GetArraySize(list), k = 0;
  long long *ids = malloc((n ? n : 1) * sizeof(*ids));
  if (!ids) return;
  cJSON_ArrayForEach(t, list) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "id");
    if (cJSON_IsNumber(v) && k < n) ids[k++] = (long long)v->valuedouble;
  }
  qsort(ids, k, sizeof(*ids), cmp_ll);
  pthread_mutex_lock(&f->mu);
  free(f->trial_ids);
  f->trial_ids = ids;
  f->ntrial_ids = k;
  pthread_mutex_unlock(&f->mu);
}

/* The pause between two looks: s seconds, ended early when the event
 * stream says the experiment itself changed (its end: the run is over at
 * once, not at the next second) or when a signal came. The wait is cut in
 * slices of WATCH_SIGNAL_SLICE_S to see cli_signal, which a condition
 * variable does not. Without a stream: the whole pause. */
#define WATCH_SIGNAL_SLICE_S 0.1
static void feed_wait(struct watch_feed *f, double s) {
  double end = clock_mono_s() + s;
  pthread_mutex_lock(&f->mu);
  while (!f->urgent && !cli_signal) {
    double left = end - clock_mono_s();
    if (left <= 0) break;
    if (left > WATCH_SIGNAL_SLICE_S) left = WATCH_SIGNAL_SLICE_S;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double at = (double)ts.tv_sec + ts.tv_nsec / 1e9 + left;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - floor(at)) * 1e9);
    pthread_cond_timedwait(&f->cv, &f->mu, &ts);
  }
  f->urgent = 0;
  pthread_mutex_unlock(&f->mu);
}

static int feed_ended(struct watch_feed *f) {
  pthread_mutex_lock(&f->mu);
  int e = f->ended;
  pthread_mutex_unlock(&f->mu);
  return e;
}

static int count_lines(const char *t) {
  int n = 0;
  for (; *t; t++) n += *t == '\n';
  return n;
}

static int print_json_state(const struct report_state *s, double now) {
  cJSON *j = report_to_json(s, now);
  char *txt = j ? jsonout_print(j) : NULL;
  cJSON_Delete(j);
  if (!txt) return -ENOMEM;
  printf("%s\n", txt);
  fflush(stdout);
  free(txt);
  return 0;
}

static int exp_running(const struct report_state *s) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(s->experiment, "status");
  /* PAUSED (a user's pause) is not an end: `ctune resume` continues it. */
  return cJSON_IsString(st) &&
         (!strcmp(st->valuestring, "RUNNING") || !strcmp(st->valuestring, "PAUSED"));
}

int cli_watch(struct http_client *c, long long id, const struct watch_opts *o,
              struct report_state *final, struct http_error *err) {
  struct report_state prev, cur;
  int have_prev = 0, drawn_lines = 0, rc = 0, told_ended = 0;
  double last_table = -1e9, last_json = -1e9;
  long long last_json_seq = -2;
  memset(&prev, 0, sizeof(prev));
  memset(&cur, 0, sizeof(cur));
  struct watch_feed feed;
  feed_start(&feed, c, id);
  const char *hook = TESTHOOK(TESTHOOK_WATCH_PAUSE_S);
  double pause_s = hook ? atof(hook) : 1.0;
  for (;;) {
    if (cli_signal) {
      rc = -EINTR;
      break;
    }
    if (o->check && (rc = o->check(o->check_ctx))) break;
    /* The stream says it ended: told before the last fetch, which can take
     * a while (every trial), so the caller's clean-up starts meanwhile. */
    if (o->on_ended && !told_ended && feed_ended(&feed)) {
      told_ended = 1;
      o->on_ended(o->check_ctx);
    }
    /* Nothing changed since the last fetch (the event stream says so): the
     * same state again, drawn at the new time. */
    int fetch = !have_prev || feed_take(&feed);
    if (fetch) {
      /* After the first look, only the trials that changed since it. */
      rc = have_prev ? cli_fetch_changes(c, id, &prev, &cur, err)
                     : cli_fetch_state(c, id, &cur, err);
      if (rc) {
        if (rc == HTTP_ERR_UNREACHABLE && cli_signal) rc = -EINTR;
        break;
      }
      feed_set_trials(&feed, &cur);
    } else {
      cur = prev; /* borrowed: given back below */
    }
    double now = clock_wall_s(), mono = clock_mono_s();
    int running = exp_running(&cur);
    if (o->json) {
      if (!running || cur.last_seq != last_json_seq || mono - last_json >= o->interval_s) {
        if ((rc = print_json_state(&cur, now))) break;
        last_json = mono;
        last_json_seq = cur.last_seq;
      }
    } else if (o->tty) {
      /* The terminal may have been resized since the last draw. */
      struct winsize ws;
      int width = o->width, height = 0;
      if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
        if (!o->fixed_width && ws.ws_col >= 20) width = ws.ws_col;
        height = ws.ws_row;
      }
      char *text;
      if ((rc = report_render(&cur, now, width, REPORT_MAX_ROWS, &text))) break;
      int lines = count_lines(text);
      /* Cursor-up cannot reach above the screen: taller output, or a taller
       * previous draw, gets a cleared screen instead. */
      if (drawn_lines && height > 0 && (lines >= height || drawn_lines >= height))
        fputs("\033[H\033[2J", stdout);
      else if (drawn_lines)
        printf("\033[%dA\033[J", drawn_lines);
      fputs(text, stdout);
      fflush(stdout);
      drawn_lines = lines;
      free(text);
    } else {
      char *ev;
      if (fetch) { /* unchanged: no trial event to tell */
        const struct report_state *before = have_prev ? &prev : report_events_base(o->from_start);
        if ((rc = report_events(before, &cur, &ev))) break;
        fputs(ev, stdout);
        free(ev);
      }
      if (!running || mono - last_table >= o->interval_s) {
        char *text;
        if ((rc = report_render(&cur, now, o->width, REPORT_MAX_ROWS, &text))) break;
        printf("%s\n", text);
        free(text);
        last_table = mono;
      }
      fflush(stdout);
    }
    if (fetch) {
      if (have_prev) report_state_free(&prev);
      prev = cur;
      have_prev = 1;
    }
    memset(&cur, 0, sizeof(cur));
    if (!running) break;
    feed_wait(&feed, pause_s);
  }
  feed_stop(&feed);
  /* A break while cur borrowed prev: prev is the one to free. */
  if (have_prev && cur.experiment == prev.experiment) memset(&cur, 0, sizeof(cur));
  report_state_free(&cur);
  if (final && have_prev)
    *final = prev;
  else if (have_prev)
    report_state_free(&prev);
  return rc;
}
