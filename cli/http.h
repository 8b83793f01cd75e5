/* http: a small blocking JSON client for the ctune REST API (libcurl easy).
 * Errors come back as a negative errno plus one line for a person. */
#ifndef CTUNE_CLI_HTTP_H
#define CTUNE_CLI_HTTP_H

#include <stddef.h>
#include <cJSON.h>

struct http_client {
  char *base;        /* "http://host:port", no trailing slash */
  char *auth_header; /* "Authorization: Bearer ..." or NULL */
  void *curl;        /* CURL *, reused between requests */
  long timeout_ms;
  /* PEM CA bundle that verifies an https:// server (CURLOPT_CAINFO) instead
   * of the system store; NULL = the system store. Never unverified. */
  const char *ca_file;
};

/* Status-to-error mapping, the CLI's exit codes follow from these. */
#define HTTP_ERR_UNREACHABLE (-ECONNREFUSED) /* no answer at the URL */
#define HTTP_ERR_AUTH (-EACCES)              /* 401 or 403 */
#define HTTP_ERR_NOT_FOUND (-ENOENT)         /* 404 */
#define HTTP_ERR_REJECTED (-EINVAL)          /* other 4xx */
#define HTTP_ERR_SERVER (-EIO)               /* 5xx or a body that is not JSON */

struct http_error {
  long status;       /* HTTP status, 0 when none came */
  char code[64];     /* the server's error.code, if any */
  char message[768]; /* one line for a person */
};

/* base is copied; token may be NULL. */
int http_client_init(struct http_client *c, const char *base, const char *token);
void http_client_free(struct http_client *c);

/* Sends method path (body: JSON text or NULL). On 2xx *out holds the parsed
 * body (NULL for 204 or an empty body); the caller cJSON_Deletes it. Otherwise
 * returns one of the HTTP_ERR_ codes with err filled. */
int http_json(struct http_client *c, const char *method, const char *path, const char *body,
              cJSON **out, struct http_error *err);

/* Maps the negative result of http_json to the CLI's exit code. */
int http_exit_code(int rc);

/* Reads a token file: the line "admin <t>" / "admin=<t>" / "admin: <t>" when
 * there is one, else the first non-empty line. Returns 0 with *out malloc'd,
 * or a negative errno with err filled. */
int http_read_token_file(const char *path, char **out, char *err, size_t errlen);

#endif
