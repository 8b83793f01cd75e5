/* api_util: JSON replies, the error shape, body and query parsing. */
#include "api.h"
#include "jsonstrict.h"
#include "utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reply's JSON body: text (malloc'd, taken; NULL: out of memory). */
static int api_json_body(struct api_resp *r, int status, char *text) {
  if (!text) return -ENOMEM;
  free(r->body);
  r->status = status;
  r->body = text;
  r->len = strlen(text);
  r->content_type = "application/json";
  return 0;
}

int api_json(struct api_resp *r, int status, cJSON *body) {
  char *text = body ? jsonout_print(body) : NULL; /* exact numbers */
  cJSON_Delete(body);
  return api_json_body(r, status, text);
}

int api_error(struct api_resp *r, int status, const char *code, const char *path, const char *fmt,
              ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* Messages and paths may quote what the client sent: keep the JSON valid. */
  char where[256];
  snprintf(where, sizeof where, "%s", path ? path : "");
  utf8_sanitize(msg, strlen(msg));
  utf8_sanitize(where, strlen(where));
  path = where;
  cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
  if (!e || !cJSON_AddStringToObject(e, "code", code) ||
      !cJSON_AddStringToObject(e, "message", msg) ||
      !cJSON_AddStringToObject(e, "path", path ? path : "")) {
    cJSON_Delete(root);
    return -ENOMEM;
  }
  r->ticket = 0; /* a rejected request changed nothing: no need to wait */
  return api_json(r, status, root);
}

int api_json_text(struct api_resp *r, int status, const char *text) {
  return api_json_body(r, status, strdup(text));
}

const char *api_decision_json(int stop) {
  return stop ? "{\"decision\":\"stop\"}" : "{\"decision\":\"continue\"}";
}

int api_no_content(struct api_resp *r) {
  free(r->body);
  r->body = NULL;
  r->len = 0;
  r->status = 204;
  r->content_type = NULL;
  return 0;
}

void api_header(struct api_resp *r, const char *name, const char *fmt, ...) {
  if (r->nheaders == API_MAX_HEADERS) return;
  r->headers[r->nheaders].name = name;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->headers[r->nheaders].value, sizeof r->headers[0].value, fmt, ap);
  va_end(ap);
  r->nheaders++;
}

int api_json_strict(const struct api_req *req, struct api_resp *resp) {
  struct jsonstrict_error e;
  int rc = jsonstrict_check(req->body, req->body_len, &e);
  if (rc == -EINVAL)
    api_error(resp, 400, "invalid_json", e.path, "request body: %s", e.message);
  else if (rc)
    api_error(resp, 500, "internal", "", "out of memory");
  return rc;
}

cJSON *api_body_json(const struct api_req *req, struct api_resp *resp) {
  size_t bad = 0;
  if (!utf8_valid(req->body, req->body_len, &bad)) {
    api_error(resp, 400, "invalid_json", "", "request body is not valid UTF-8 (byte %zu)", bad);
    return NULL;
  }
  if (api_json_strict(req, resp)) return NULL;
  const char *end = NULL;
  cJSON *o = cJSON_ParseWithLengthOpts(req->body, req->body_len, &end, 0);
  if (!o) {
    size_t at = end && end >= req->body ? (size_t)(end - req->body) : 0;
    api_error(resp, 400, "invalid_json", "", "request body is not valid JSON (near byte %zu)", at);
    return NULL;
  }
  return o;
}

cJSON *api_body_object(const struct api_req *req, struct api_resp *resp, int empty_ok) {
  if (req->body_len == 0 && empty_ok) {
    cJSON *o = cJSON_CreateObject();
    if (!o) api_error(resp, 500, "internal", "", "out of memory");
    return o;
  }
  cJSON *o = api_body_json(req, resp);
  if (o && !cJSON_IsObject(o)) {
    cJSON_Delete(o);
    api_error(resp, 400, "invalid_json", "", "request body must be a JSON object");
    return NULL;
  }
  return o;
}

int api_query_int(const struct api_req *req, struct api_resp *resp, const char *key, int64_t lo,
                  int64_t hi, int64_t dflt, int64_t *out) {
  const char *v = req->query(req->conn, key);
  if (!v) {
    *out = dflt;
    return 0;
  }
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi) {
    api_error(resp, 400, "invalid_query", key,
              "query parameter %s must be an integer in "
              "[%lld, %lld], got '%s'",
              key, (long long)lo, (long long)hi, v);
    return -EINVAL;
  }
  *out = x;
  return 0;
}

cJSON *api_time(double t) { return t > 0 ? cJSON_CreateNumber(t) : cJSON_CreateNull(); }

int api_add_objectives(cJSON *o, const struct experiment_spec *spec) {
  if (spec->nobjectives < 2) return 0;
  cJSON *m = cJSON_AddArrayToObject(o, "metrics"), *d = cJSON_AddArrayToObject(o, "modes");
  if (!m || !d) return -ENOMEM;
  for (int i = 0; i < spec->nobjectives; i++) {
    cJSON *a = cJSON_CreateString(spec->objectives[i]);
    if (!a || !cJSON_AddItemToArray(m, a)) {
      cJSON_Delete(a);
      return -ENOMEM;
    }
    cJSON *b = cJSON_CreateString(spec->modes[i] == SPEC_MODE_MAX ? "max" : "min");
    if (!b || !cJSON_AddItemToArray(d, b)) {
      cJSON_Delete(b);
      return -ENOMEM;
    }
  }
  return 0;
}

int api_add_constraint_metrics(cJSON *o, const struct experiment_spec *spec) {
  if (!spec->nconstraints) return 0;
  cJSON *m = cJSON_AddArrayToObject(o, "constraint_metrics");
  if (!m) return -ENOMEM;
  for (int i = 0; i < spec->nconstraints; i++) {
    int seen = 0;
    for (int j = 0; j < i; j++)
      seen |= !strcmp(spec->constraints[j].metric, spec->constraints[i].metric);
    if (seen) continue;
    cJSON *a = cJSON_CreateString(spec->constraints[i].metric);
    if (!a || !cJSON_AddItemToArray(m, a)) {
      cJSON_Delete(a);
      return -ENOMEM;
    }
  }
  return 0;
}

/* docs/protocol.md#pages: the cursor is the position after the last item of
 * the previous page (an id, or a result's index), as a decimal string;
 * clients treat it as opaque. */
int api_page_args(const struct api_req *req, struct api_resp *resp, int64_t dflt_limit,
                  int64_t *limit, int64_t *after) {
  if (api_query_int(req, resp, "limit", 1, API_PAGE_MAX, dflt_limit, limit)) return -EINVAL;
  const char *c = req->query(req->conn, "cursor");
  *after = 0;
  if (!c || !*c) return 0;
  char *end = NULL;
  errno = 0;
  long long x = strtoll(c, &end, 10);
  if (*end || errno || x < 0 || *c == '+' || *c == '-' || *c == ' ') {
    api_error(resp, 400, "invalid_cursor", "cursor",
              "cursor must be a next_cursor this "
              "server returned, got '%s'",
              c);
    return -EINVAL;
  }
  *after = x;
  return 0;
}

int api_page_next(cJSON *root, int more, int64_t after) {
  if (!more) return cJSON_AddNullToObject(root, "next_cursor") ? 0 : -ENOMEM;
  char buf[24];
  snprintf(buf, sizeof buf, "%lld", (long long)after);
  return cJSON_AddStringToObject(root, "next_cursor", buf) ? 0 : -ENOMEM;
}
