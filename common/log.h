/* One-line-per-event logging to stderr, shared by every ctune program. */
#ifndef CTUNE_LOG_H
#define CTUNE_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Name printed on every line ("ctune-server"); the pointer must outlive use. */
void log_set_program(const char *name);
/* Lines below this level are dropped; default LOG_INFO, CTUNE_LOG_LEVEL=debug
 * in the environment lowers it. */
void log_set_level(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
