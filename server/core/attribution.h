/* attribution: who a failed trial attempt is blamed on (a config, a
 * machine, the user's code, a resource limit), from what the attempt said
 * and what other attempts and workers did (docs/scheduling.md#failures-told-apart).
 * Pure: no I/O, no state; the server gathers the facts (state/quarantine.c). */
#ifndef CTUNE_ATTRIBUTION_H
#define CTUNE_ATTRIBUTION_H

#include <stddef.h>

enum attribution {
  ATTR_NONE = 0,  /* no failed attempt */
  ATTR_UNKNOWN,   /* not told apart (yet: a retry elsewhere may tell) */
  ATTR_CONFIG,    /* it failed the same way on two machines */
  ATTR_MACHINE,   /* it succeeded or ran elsewhere, or its worker is quarantined */
  ATTR_USER_CODE, /* a traceback in the user's script before the first result */
  ATTR_RESOURCE,  /* the trial's memory or time limit */
};

/* What an attempt's error looks like by itself. */
enum attr_kind {
  ATTR_KIND_OTHER = 0,
  ATTR_KIND_DEVICE,   /* CUDA/NCCL errors, GPU out of memory, no usable device */
  ATTR_KIND_RESOURCE, /* killed at its memory_mb, or its CPU time limit */
  ATTR_KIND_TRACEBACK /* a Python traceback (and not a device error) */
};

/* "config", "machine", ...; "" for ATTR_NONE. */
const char *attribution_name(enum attribution a);
/* The value of a name, or -1 when it names none ("" is ATTR_NONE). */
int attribution_parse(const char *name);

/* The kind of a stored error: "REASON: first line\nstderr tail" as the
 * server keeps it (docs/protocol.md#fail-reasons). NULL: ATTR_KIND_OTHER. */
enum attr_kind attribution_kind(const char *error);

/* The facts about one failed attempt. */
struct attribution_in {
  enum attr_kind kind;
  int had_result;         /* this attempt reported a result before it failed */
  int worker_quarantined; /* its worker is (now) quarantined */
  int ok_elsewhere;       /* another worker ran this trial on past it, or ended it */
  int same_elsewhere;     /* an attempt on another worker failed with the same signature */
};

/* The rules, first match wins: quarantined worker or ok elsewhere ->
 * machine; resource -> resource; traceback before the first result ->
 * user_code; same failure on two machines -> config; else unknown. */
enum attribution attribution_decide(const struct attribution_in *in);

/* Whether a failure is retried once on another worker before it is
 * counted against the trial: its attribution is still unknown, it was not
 * retried elsewhere yet, and another worker may take it. */
int attribution_retry_elsewhere(enum attribution a, int retried_before, int other_worker);

/* The error's signature, what groups failures that are the same: its
 * reason and its last non-empty line (for a traceback, the exception; for
 * a one-line error, that line), with runs of digits as "N" and hex numbers
 * as "0xN", at most cap-1 bytes (never cut inside a character). */
void attribution_signature(const char *error, char *buf, size_t cap);

#endif
