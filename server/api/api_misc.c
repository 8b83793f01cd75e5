/* api_misc: /healthz, /metrics, and the dashboard's static files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "static_path.h"

int api_healthz(struct server *s, const struct api_req *req, struct api_resp *resp) {
  (void)s;
  (void)req;
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddStringToObject(o, "status", "ok") ||
      !cJSON_AddStringToObject(o, "version", CTUNE_VERSION)) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  return api_json(resp, 200, o);
}

int api_metrics(struct server *s, const struct api_req *req, struct api_resp *resp) {
  (void)req;
  size_t cap = 16384;
  char *buf = malloc(cap);
  if (!buf) return -ENOMEM;
  int64_t trials[TS_COUNT] = {0}, exps[ES_COUNT] = {0}, workers[2] = {0}, unusable, compact;
  int64_t cold;
  server_lock(s);
  unusable = s->unusable_rows;
  compact = s->ncompact;
  cold = s->ncold;
  for (int64_t i = 0; i < s->nexps; i++) {
    if (s->exps[i]->deleted) continue; /* a deleted experiment's tombstone */
    exps[s->exps[i]->status]++;
    for (int j = 0; j < TS_COUNT; j++) trials[j] += s->exps[i]->counts[j];
  }
  for (int64_t i = 0; i < s->nworkers; i++) workers[s->workers[i]->lost]++;
  server_unlock(s);
  uint64_t batches, ops, flushes;
  double flush_s;
  commit_stats(s->commit, &batches, &ops);
  commit_flush_stats(s->commit, &flushes, &flush_s);
  uint64_t pending = commit_pending(s->commit);
  int off =
      snprintf(buf, cap, "# HELP ctune_trials Trials by status.\n# TYPE ctune_trials gauge\n");
  for (int j = 0; j < TS_COUNT; j++)
    off += snprintf(buf + off, cap - (size_t)off, "ctune_trials{status=\"%s\"} %lld\n",
                    trial_status_names[j], (long long)trials[j]);
  off +=
      snprintf(buf + off, cap - (size_t)off,
               "# HELP ctune_experiments Experiments by status.\n# TYPE ctune_experiments gauge\n");
  for (int j = 0; j < ES_COUNT; j++)
    off += snprintf(buf + off, cap - (size_t)off, "ctune_experiments{status=\"%s\"} %lld\n",
                    exp_status_names[j], (long long)exps[j]);
  off += snprintf(buf + off, cap - (size_t)off,
                  "# HELP ctune_workers Registered workers.\n# TYPE ctune_workers gauge\n"
                  "ctune_workers{status=\"alive\"} %lld\nctune_workers{status=\"lost\"} %lld\n"
                  "# HELP ctune_commit_batches_total Transactions of the group commit.\n"
                  "# TYPE ctune_commit_batches_total counter\nctune_commit_batches_total %llu\n"
                  "# HELP ctune_commit_ops_total Writes committed.\n"
                  "# TYPE ctune_commit_ops_total counter\nctune_commit_ops_total %llu\n"
                  "# HELP ctune_commit_flushes_total WAL flushes before replies (--durability "
                  "full).\n# TYPE ctune_commit_flushes_total counter\n"
                  "ctune_commit_flushes_total %llu\n"
                  "# HELP ctune_commit_flush_seconds_total Time spent in those flushes.\n"
                  "# TYPE ctune_commit_flush_seconds_total counter\n"
                  "ctune_commit_flush_seconds_total %.6f\n"
                  "# HELP ctune_commit_pending Changes handed to the writer and not yet "
                  "committed or failed.\n# TYPE ctune_commit_pending gauge\n"
                  "ctune_commit_pending %llu\n"
                  "# HELP ctune_unusable_rows Rows the last load could not use (logged, kept).\n"
                  "# TYPE ctune_unusable_rows gauge\nctune_unusable_rows %lld\n"
                  "# HELP ctune_trials_compact Ended trials kept as a summary (bounded memory).\n"
                  "# TYPE ctune_trials_compact gauge\nctune_trials_compact %lld\n"
                  "# HELP ctune_experiments_cold Finished experiments whose trials are not in "
                  "memory.\n# TYPE ctune_experiments_cold gauge\nctune_experiments_cold %lld\n"
                  "# HELP ctune_leases_held Lease requests held until work comes (wait_ms).\n"
                  "# TYPE ctune_leases_held gauge\nctune_leases_held %d\n",
                  (long long)workers[0], (long long)workers[1], (unsigned long long)batches,
                  (unsigned long long)ops, (unsigned long long)flushes, flush_s,
                  (unsigned long long)pending, (long long)unusable, (long long)compact,
                  (long long)cold, lease_wait_count(s));
  int m = off < (int)cap ? metrics_format(&s->metrics, buf + off, cap - (size_t)off) : -ENOSPC;
  if (m < 0) {
    free(buf);
    return -ENOSPC;
  }
  free(resp->body);
  resp->status = 200;
  resp->body = buf;
  resp->len = (size_t)(off + m);
  resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
  return 0;
}

static int api_serve_file(const char *root, const char *rel, const struct api_req *req,
                          struct api_resp *resp) {
  char path[4096];
  int rc = static_path_join(root, rel, path, sizeof path);
  if (rc == -EINVAL)
    return api_error(resp, 400, "bad_path", req->path, "path %s is not allowed", req->path);
  int fd = rc ? -1 : open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode))) {
    close(fd);
    fd = -1;
  }
  if (fd < 0) return api_error(resp, 404, "not_found", req->path, "no file %s", req->path);
  char etag[64];
  snprintf(etag, sizeof etag, "\"%llx-%llx\"", (unsigned long long)st.st_size,
           (unsigned long long)st.st_mtime);
  api_header(resp, "ETag", "%s", etag);
  api_header(resp, "Cache-Control", "no-cache");
  char lm[64];
  struct tm tm;
  gmtime_r(&st.st_mtime, &tm);
  strftime(lm, sizeof lm, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  api_header(resp, "Last-Modified", "%s", lm);
  const char *inm = req->header(req->conn, "If-None-Match");
  if (inm && !strcmp(inm, etag)) {
    close(fd);
    free(resp->body);
    resp->body = NULL;
    resp->len = 0;
    resp->status = 304;
    return 0;
  }
  char *buf = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (buf && got < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (!buf) return -ENOMEM;
  free(resp->body);
  resp->status = 200;
  resp->body = buf;
  resp->len = got;
  resp->content_type = static_content_type(path);
  return 0;
}

int api_static_vendor(struct server *s, const struct api_req *req, struct api_resp *resp) {
  if (!req->match->rest[0] || !static_vendor_allowed(req->match->rest))
    return api_error(resp, 404, "not_found", req->path, "no file %s", req->path);
  return api_serve_file(s->opt.vendor_dir, req->match->rest, req, resp);
}

/* Jupyter's login: GET /?token=T with the admin (or viewer) token sets a
 * session cookie (a random id kept in memory, never the token) and
 * redirects to the same path without the query, so the token leaves the
 * address bar and the history. */
static int api_login(struct server *s, const struct api_req *req, struct api_resp *resp,
                     const char *token) {
  char bearer[300];
  snprintf(bearer, sizeof bearer, "Bearer %s", token);
  int role = auth_role(bearer, s->admin_token, s->worker_token, s->viewer_token);
  if (role != RA_ADMIN && role != AUTH_VIEWER) return 1; /* the login page says why */
  char id[64], name[32];
  int rc = auth_session_create(s->sessions, role, id, sizeof id);
  if (rc) return rc;
  auth_cookie_name(s, name, sizeof name);
  free(resp->body);
  resp->body = NULL;
  resp->len = 0;
  resp->status = 303;
  api_header(resp, "Location", "%s", req->path);
  /* Under TLS the browser must never send it over plain HTTP: cookies ignore
   * ports and schemes, so another service on this host name would get it. */
  api_header(resp, "Set-Cookie", "%s=%s; HttpOnly; SameSite=Strict; Path=/%s", name, id,
             s->opt.tls_cert_pem ? "; Secure" : "");
  api_header(resp, "Cache-Control", "no-store");
  return 0;
}

int api_static_web(struct server *s, const struct api_req *req, struct api_resp *resp) {
  const char *rest = req->match->rest;
  if (!strncmp(rest, "api/", 4) || !strcmp(rest, "api"))
    return api_error(resp, 404, "not_found", req->path, "no route for GET %s", req->path);
  /* The page itself needs a login; its scripts and styles hold no data. */
  int page = !rest[0] || !strcmp(rest, "index.html");
  if (s->auth && page) {
    const char *token = req->query(req->conn, "token");
    if (token) {
      int rc = api_login(s, req, resp, token);
      if (rc <= 0) return rc;
    } else if (auth_session_role(s, req->header(req->conn, "Cookie")) >= 0 ||
               auth_role(req->header(req->conn, "Authorization"), s->admin_token, "",
                         s->viewer_token) >= 0) {
      return api_serve_file(s->opt.web_dir, rest, req, resp);
    }
    /* No data on it: "log in with the URL the server printed". */
    int rc = api_serve_file(s->opt.web_dir, "login.html", req, resp);
    if (!rc && resp->status == 200) resp->status = 401;
    return rc;
  }
  return api_serve_file(s->opt.web_dir, rest, req, resp);
}
