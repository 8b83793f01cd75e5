/* preempt_watch: polls a preemption notice file or command (preempt_watch.h). */
#include "preempt_watch.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "preempt.h"

#define PREEMPT_OUT_MAX 255

struct preempt_watch {
  uv_loop_t *loop;
  const char *spec; /* the option's text, owned by argv */
  const char *file; /* "file:PATH": PATH; else NULL (a command) */
  unsigned poll_ms;
  preempt_notice_cb on_notice;
  void *arg;
  uv_timer_t timer;
  uv_process_t proc;
  uv_pipe_t out;
  int handles;         /* open: timer, and proc + out while a command runs */
  int running;         /* a command is out: proc and out are open */
  int exited, eof;     /* what of it has ended */
  int64_t exit_status; /* its status (-1: a signal) */
  uint64_t started_ms; /* when it was spawned */
  int fired, closing;
  char buf[PREEMPT_OUT_MAX + 1];
  size_t len;
};

static void pw_closed(uv_handle_t *h) {
  struct preempt_watch *pw = h->data;
  pw->handles--;
}

static void pw_fire(struct preempt_watch *pw, const char *what) {
  if (pw->fired || pw->closing) return;
  pw->fired = 1;
  uv_timer_stop(&pw->timer);
  pw->on_notice(pw->arg, what);
}

/* Both the exit and the end of its output are in: judge, close. */
static void pw_command_done(struct preempt_watch *pw) {
  if (!pw->exited || !pw->eof || !pw->running) return;
  pw->running = 0;
  uv_close((uv_handle_t *)&pw->proc, pw_closed);
  uv_close((uv_handle_t *)&pw->out, pw_closed);
  pw->buf[pw->len] = '\0';
  if (pw->exit_status == 0 && preempt_output_is_notice(pw->buf)) {
    char what[PREEMPT_OUT_MAX + 64];
    size_t n = strcspn(pw->buf, "\n");
    snprintf(what, sizeof what, "--preemption-notice said \"%.*s\"", (int)(n > 80 ? 80 : n),
             pw->buf);
    pw_fire(pw, what);
  }
}

static void pw_on_exit(uv_process_t *p, int64_t status, int sig) {
  struct preempt_watch *pw = p->data;
  pw->exited = 1;
  pw->exit_status = sig ? -1 : status;
  pw_command_done(pw);
}

static void pw_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  struct preempt_watch *pw = h->data;
  (void)hint;
  size_t room = PREEMPT_OUT_MAX - pw->len;
  /* A full buffer still reads (into the tail) so that the pipe drains. */
  b->base = room ? pw->buf + pw->len : pw->buf + PREEMPT_OUT_MAX - 1;
  b->len = room ? room : 1;
}

static void pw_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  struct preempt_watch *pw = s->data;
  (void)b;
  if (n > 0 && pw->len < PREEMPT_OUT_MAX) pw->len += (size_t)n;
  if (n < 0) {
    uv_read_stop(s);
    pw->eof = 1;
    pw_command_done(pw);
  }
}

static void pw_spawn(struct preempt_watch *pw) {
  char *args[] = {"/bin/sh", "-c", (char *)pw->spec, NULL};
  uv_stdio_container_t stdio[3] = {
      {.flags = UV_IGNORE},
      {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&pw->out},
      {.flags = UV_INHERIT_FD, .data.fd = 2}};
  uv_process_options_t o = {
      .exit_cb = pw_on_exit, .file = args[0], .args = args, .stdio = stdio, .stdio_count = 3};
  int rc = uv_pipe_init(pw->loop, &pw->out, 0);
  if (rc) {
    log_warn("--preemption-notice: cannot make a pipe: %s", uv_strerror(rc));
    return;
  }
  pw->out.data = pw;
  pw->handles++;
  pw->proc.data = pw;
  rc = uv_spawn(pw->loop, &pw->proc, &o);
  if (rc) {
    log_warn("--preemption-notice: cannot run /bin/sh -c '%s': %s", pw->spec, uv_strerror(rc));
    uv_close((uv_handle_t *)&pw->out, pw_closed);
    return;
  }
  pw->handles++;
  pw->running = 1;
  pw->exited = pw->eof = 0;
  pw->len = 0;
  pw->started_ms = uv_now(pw->loop);
  rc = uv_read_start((uv_stream_t *)&pw->out, pw_alloc, pw_on_read);
  if (rc) pw->eof = 1;
}

static void pw_on_timer(uv_timer_t *t) {
  struct preempt_watch *pw = t->data;
  if (pw->fired || pw->closing) return;
  if (pw->file) {
    if (access(pw->file, F_OK) == 0) {
      char what[300];
      snprintf(what, sizeof what, "the notice file %.200s exists", pw->file);
      pw_fire(pw, what);
    }
    return;
  }
  if (pw->running) {
    if (!pw->exited && uv_now(pw->loop) - pw->started_ms >= pw->poll_ms) {
      log_warn("--preemption-notice: the command ran for %u ms: killed (it must answer within "
               "the poll interval)",
               pw->poll_ms);
      uv_process_kill(&pw->proc, SIGKILL);
    } else if (pw->exited && !pw->eof && uv_now(pw->loop) - pw->started_ms >= pw->poll_ms) {
      /* A child of the command still holds its output open: stop waiting. */
      uv_read_stop((uv_stream_t *)&pw->out);
      pw->eof = 1;
      pw_command_done(pw);
    }
    return;
  }
  if (pw->handles == 1) pw_spawn(pw); /* the last command's handles are closed */
}

int preempt_watch_start(uv_loop_t *loop, const char *spec, unsigned poll_ms,
                        preempt_notice_cb on_notice, void *arg, struct preempt_watch **out) {
  struct preempt_watch *pw = calloc(1, sizeof *pw);
  if (!pw) return -ENOMEM;
  pw->loop = loop;
  pw->spec = spec;
  pw->file = strncmp(spec, "file:", 5) == 0 ? spec + 5 : NULL;
  pw->poll_ms = poll_ms ? poll_ms : PREEMPT_DEFAULT_POLL_MS;
  pw->on_notice = on_notice;
  pw->arg = arg;
  uv_timer_init(loop, &pw->timer);
  pw->timer.data = pw;
  pw->handles = 1;
  /* The watch alone never keeps the worker running. */
  uv_unref((uv_handle_t *)&pw->timer);
  uv_timer_start(&pw->timer, pw_on_timer, 0, pw->poll_ms);
  *out = pw;
  return 0;
}

void preempt_watch_close(struct preempt_watch *pw) {
  if (!pw || pw->closing) return;
  pw->closing = 1;
  uv_timer_stop(&pw->timer);
  uv_close((uv_handle_t *)&pw->timer, pw_closed);
  if (pw->running) {
    pw->running = 0;
    if (!pw->exited) uv_process_kill(&pw->proc, SIGKILL);
    uv_close((uv_handle_t *)&pw->proc, pw_closed);
    uv_close((uv_handle_t *)&pw->out, pw_closed);
  }
}

void preempt_watch_free(struct preempt_watch *pw) {
  if (!pw) return;
  if (pw->handles) log_error("preempt_watch_free: %d handle(s) still open", pw->handles);
  free(pw);
}
