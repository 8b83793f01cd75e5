/* http: blocking JSON requests to the ctune REST API over libcurl's easy
 * interface, with the server's error body turned into one line for a person. */
#include <errno.h>

#include "http.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exitcode.h"
#include "sbuf.h"

int http_client_init(struct http_client *c, const char *base, const char *token) {
  memset(c, 0, sizeof(*c));
  static int global_done;
  if (!global_done) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return -EIO;
    global_done = 1;
  }
  size_t n = strlen(base);
  while (n > 0 && base[n - 1] == '/') n--;
  c->base = strndup(base, n);
  if (!c->base) goto fail;
  if (token) {
    size_t len = strlen(token) + 32;
    c->auth_header = malloc(len);
    if (!c->auth_header) goto fail;
    snprintf(c->auth_header, len, "Authorization: Bearer %s", token);
  }
  c->curl = curl_easy_init();
  if (!c->curl) goto fail;
  c->timeout_ms = 15000;
  return 0;
fail:
  http_client_free(c);
  return -ENOMEM;
}

void http_client_free(struct http_client *c) {
  if (c->curl) curl_easy_cleanup(c->curl);
  free(c->base);
  free(c->auth_header);
  memset(c, 0, sizeof(*c));
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
  struct sbuf *b = user;
  sbuf_putn(b, data, size * nmemb);
  return b->err ? 0 : size * nmemb;
}

/* Copies the server's {"error": {...}} into err, falling back to the text. */
static void fill_server_error(struct http_error *err, const char *body) {
  cJSON *doc = body ? cJSON_Parse(body) : NULL;
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(doc, "error");
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
  const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
  const cJSON *path = cJSON_GetObjectItemCaseSensitive(e, "path");
  if (cJSON_IsString(code)) snprintf(err->code, sizeof(err->code), "%s", code->valuestring);
  size_t pl = cJSON_IsString(path) ? strlen(path->valuestring) : 0;
  /* The server's invalid_config messages already start with "path: ". */
  if (cJSON_IsString(msg) && pl &&
      !(strncmp(msg->valuestring, path->valuestring, pl) == 0 && msg->valuestring[pl] == ':'))
    snprintf(err->message, sizeof(err->message), "%s: %s", path->valuestring, msg->valuestring);
  else if (cJSON_IsString(msg))
    snprintf(err->message, sizeof(err->message), "%s", msg->valuestring);
  else if (cJSON_IsString(e))
    snprintf(err->message, sizeof(err->message), "%s", e->valuestring);
  else if (body && *body) {
    /* Not our JSON: keep the first line of whatever came back. */
    size_t n = strcspn(body, "\r\n");
    if (n > 200) n = 200;
    snprintf(err->message, sizeof(err->message), "%.*s", (int)n, body);
  }
  cJSON_Delete(doc);
}

int http_json(struct http_client *c, const char *method, const char *path, const char *body,
              cJSON **out, struct http_error *err) {
  struct sbuf resp;
  struct curl_slist *hdrs = NULL;
  char url[2048];
  char curl_msg[CURL_ERROR_SIZE] = "";
  int rc = 0;
  *out = NULL;
  memset(err, 0, sizeof(*err));
  sbuf_init(&resp);
  snprintf(url, sizeof(url), "%s%s", c->base, path);

  CURL *h = c->curl;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_msg);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "ctune-cli/0.1");
  /* https:// is verified (peer and host name, curl's defaults, never turned
   * off) against --ca-file or the system store; only http and https, so a
   * redirect or a typo cannot reach another protocol. */
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (c->ca_file && *c->ca_file) curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
  hdrs = curl_slist_append(hdrs, "Accept: application/json");
  if (!hdrs) {
    rc = -ENOMEM;
    goto done;
  }
  if (c->auth_header) {
    struct curl_slist *n = curl_slist_append(hdrs, c->auth_header);
    if (!n) {
      rc = -ENOMEM;
      goto done;
    }
    hdrs = n;
  }
  if (body) {
    struct curl_slist *n = curl_slist_append(hdrs, "Content-Type: application/json");
    if (!n) {
      rc = -ENOMEM;
      goto done;
    }
    hdrs = n;
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  } else if (!strcmp(method, "POST")) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

  CURLcode cc = curl_easy_perform(h);
  if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE) {
    snprintf(err->message, sizeof(err->message),
             "TLS: cannot verify the ctune server at %s (%s); %s", c->base,
             curl_msg[0] ? curl_msg : curl_easy_strerror(cc),
             cc == CURLE_SSL_CACERT_BADFILE
                 ? "--ca-file (or CTUNE_CA_FILE) must be a readable PEM CA bundle"
                 : "pass --ca-file (or set CTUNE_CA_FILE) with the CA that signed its "
                   "certificate, or use the name the certificate was issued for");
    rc = HTTP_ERR_UNREACHABLE;
    goto done;
  }
  if (cc != CURLE_OK) {
    snprintf(err->message, sizeof(err->message),
             "cannot reach the ctune server at %s (%s); start ctune-server there "
             "or point --server / CTUNE_SERVER at a running one",
             c->base, curl_msg[0] ? curl_msg : curl_easy_strerror(cc));
    rc = HTTP_ERR_UNREACHABLE;
    goto done;
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &err->status);
  if (resp.err) {
    rc = resp.err;
    goto done;
  }
  const char *text = resp.buf ? resp.buf : "";
  if (err->status >= 200 && err->status < 300) {
    if (err->status != 204 && *text) {
      *out = cJSON_Parse(text);
      if (!*out) {
        snprintf(err->message, sizeof(err->message),
                 "the server at %s answered %s %s with a body that is not JSON; "
                 "is --server pointing at a ctune-server?",
                 c->base, method, path);
        rc = HTTP_ERR_SERVER;
      }
    }
    goto done;
  }
  char server_msg[sizeof(err->message)];
  fill_server_error(err, text);
  snprintf(server_msg, sizeof(server_msg), "%s", err->message[0] ? err->message : "no details");
  if (err->status == 401 || err->status == 403) {
    snprintf(err->message, sizeof(err->message),
             "the server at %s refused the request (%ld %s: %s); pass --token-file "
             "with a valid admin token or set CTUNE_TOKEN",
             c->base, err->status, err->status == 401 ? "unauthorized" : "forbidden", server_msg);
    rc = HTTP_ERR_AUTH;
  } else if (err->status == 404) {
    snprintf(err->message, sizeof(err->message), "%s (404 for %s %s)", server_msg, method, path);
    rc = HTTP_ERR_NOT_FOUND;
  } else if (err->status >= 400 && err->status < 500) {
    snprintf(err->message, sizeof(err->message), "rejected: %s (%ld%s%s)", server_msg, err->status,
             err->code[0] ? " " : "", err->code);
    rc = HTTP_ERR_REJECTED;
  } else {
    snprintf(err->message, sizeof(err->message),
             "the server failed on %s %s (%ld: %s); see its log", method, path, err->status,
             server_msg);
    rc = HTTP_ERR_SERVER;
  }
done:
  curl_slist_free_all(hdrs);
  sbuf_free(&resp);
  return rc;
}

int http_exit_code(int rc) {
  switch (rc) {
  case 0:
    return CLI_EXIT_OK;
  case HTTP_ERR_UNREACHABLE:
    return CLI_EXIT_UNREACHABLE;
  case HTTP_ERR_AUTH:
    return CLI_EXIT_AUTH;
  case HTTP_ERR_NOT_FOUND:
    return CLI_EXIT_NOT_FOUND;
  default:
    return CLI_EXIT_ERROR;
  }
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

int http_read_token_file(const char *path, char **out, char *err, size_t errlen) {
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(e));
    return -e;
  }
  char line[1024];
  char *first = NULL, *admin = NULL;
  while (fgets(line, sizeof(line), f)) {
    char *t = trim(line);
    if (!*t || *t == '#') continue;
    if (!strncmp(t, "admin", 5) && (t[5] == '=' || t[5] == ':' || t[5] == ' ' || t[5] == '\t')) {
      char *v = trim(t + 5);
      if (*v == '=' || *v == ':') v = trim(v + 1);
      free(admin);
      admin = strdup(v);
      if (!admin) break;
    } else if (!first) {
      /* "worker=..." lines are never what the CLI wants */
      char *v = t;
      if (!strncmp(t, "worker", 6) && (t[6] == '=' || t[6] == ':' || t[6] == ' ')) continue;
      first = strdup(v);
      if (!first) break;
    }
  }
  fclose(f);
  char *tok = admin ? admin : first;
  if (admin) free(first);
  if (!tok || !*tok) {
    free(tok);
    snprintf(err, errlen,
             "token file %s holds no token (expected a line 'admin <token>' or the token alone)",
             path);
    return -EINVAL;
  }
  *out = tok;
  return 0;
}
