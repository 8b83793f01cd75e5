/* preempt_watch: polls a preemption notice (--preemption-notice,
 * docs/worker.md#preemption) on the loop, every poll_ms: "file:PATH" is a
 * notice once PATH exists; anything else is a command run by /bin/sh -c,
 * one at a time, killed when it outlasts poll_ms, whose exit 0 with an
 * output preempt_output_is_notice() accepts is a notice. The first notice
 * calls on_notice once, and the polling stops. */
#ifndef CTUNE_WORKER_PREEMPT_WATCH_H
#define CTUNE_WORKER_PREEMPT_WATCH_H

#include <uv.h>

struct preempt_watch;

typedef void (*preempt_notice_cb)(void *arg, const char *what);

int preempt_watch_start(uv_loop_t *loop, const char *spec, unsigned poll_ms,
                        preempt_notice_cb on_notice, void *arg, struct preempt_watch **out);
/* Stops polling (a command still running is killed) and closes the handles;
 * the loop must run once more before preempt_watch_free(). */
void preempt_watch_close(struct preempt_watch *pw);
void preempt_watch_free(struct preempt_watch *pw);

#endif
