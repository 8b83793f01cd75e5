/* One-line-per-event logging: "2026-11-22T05:31:11.123Z ctune-server info msg".
 * Each line is written with a single write(2) so that lines from several
 * threads or processes sharing a stderr never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char *log_program = "ctune";
static int log_level = -1;

void log_set_program(const char *name) { log_program = name; }

void log_set_level(enum log_level level) { log_level = (int)level; }

static int log_level_from_env(void) {
  const char *v = getenv("CTUNE_LOG_LEVEL");
  if (!v) return LOG_INFO;
  if (!strcasecmp(v, "debug")) return LOG_DEBUG;
  if (!strcasecmp(v, "warn")) return LOG_WARN;
  if (!strcasecmp(v, "error")) return LOG_ERROR;
  return LOG_INFO;
}

void log_msg(enum log_level level, const char *fmt, ...) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  if (log_level < 0) log_level = log_level_from_env();
  if ((int)level < log_level) return;

  char line[2048];
  struct timeval tv;
  struct tm tm;
  gettimeofday(&tv, NULL);
  gmtime_r(&tv.tv_sec, &tm);
  int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   (long)(tv.tv_usec / 1000), log_program, names[level]);
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = (size_t)n + (size_t)m;
  if (len > sizeof line - 2) len = sizeof line - 2;
  /* Messages must stay one line: fold embedded newlines. */
  for (size_t i = (size_t)n; i < len; i++)
    if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}
