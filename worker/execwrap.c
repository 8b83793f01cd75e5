/* Exec wrapper stage of a trial: parses the options and becomes the trial's
 * supervisor (supervise.h), which forks and execs the trial itself. */
#include "execwrap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isolate.h"
#include "supervise.h"

static int execwrap_fail(const char *what, const char *detail) {
  /* One JSON line like the trainer's, so the worker's failure report and the
   * trial log both say exactly what went wrong. */
  fprintf(stderr,
          "{\"error\": {\"code\": \"exec_failed\", \"message\": \"ctune-worker: %s%s%s\"}}\n", what,
          detail ? ": " : "", detail ? detail : "");
  return EXECWRAP_EXIT_EXEC;
}

int execwrap_main(int argc, char **argv, int first) {
  struct supervise_opts o = {.report_fd = -1};
  static gid_t groups[ISOLATE_MAX_GROUPS];
  int i = first;
  for (; i < argc; i++) {
    if (!strcmp(argv[i], "--")) {
      i++;
      break;
    }
    if (i + 1 >= argc) return execwrap_fail("--exec-trial: missing value for", argv[i]);
    if (!strcmp(argv[i], "--cpus"))
      o.cpus = argv[++i];
    else if (!strcmp(argv[i], "--rlimit-as-mb"))
      o.rlimit_as_mb = atol(argv[++i]);
    else if (!strcmp(argv[i], "--cgroup"))
      o.cgroup = argv[++i];
    else if (!strcmp(argv[i], "--parent"))
      o.parent = (pid_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "--ns")) {
      const char *m = argv[++i];
      o.view.ns = !strcmp(m, "user")    ? SUPERVISE_NS_USER
                  : !strcmp(m, "mount") ? SUPERVISE_NS_MOUNT
                                        : -1;
      if (o.view.ns < 0) return execwrap_fail("--exec-trial: bad --ns", m);
    } else if (!strcmp(argv[i], "--hide") || !strcmp(argv[i], "--show")) {
      int show = argv[i][2] == 's';
      int *n = show ? &o.view.nshow : &o.view.nhide;
      if (*n >= SUPERVISE_MAX_VIEW) return execwrap_fail("--exec-trial: too many", argv[i]);
      (show ? o.view.show : o.view.hide)[(*n)++] = argv[++i];
    } else if (!strcmp(argv[i], "--report-fd"))
      o.report_fd = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--uid")) {
      o.run_as = 1;
      o.uid = (uid_t)strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--gid")) {
      o.run_as = 1;
      o.gid = (gid_t)strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--groups")) {
      /* "1,2,3"; "-" = none */
      char *p = argv[++i];
      o.ngroups = 0;
      while (*p && *p != '-' && o.ngroups < ISOLATE_MAX_GROUPS) {
        char *end;
        unsigned long g = strtoul(p, &end, 10);
        if (end == p) return execwrap_fail("--exec-trial: bad --groups", argv[i]);
        groups[o.ngroups++] = (gid_t)g;
        p = *end == ',' ? end + 1 : end;
      }
      o.groups = groups;
    }
#ifdef CTUNE_TESTHOOKS
    else if (!strcmp(argv[i], "--test-report"))
      o.test_report = argv[++i];
#endif
    else
      return execwrap_fail("--exec-trial: unknown option", argv[i]);
  }
  if (i >= argc) return execwrap_fail("--exec-trial: no program given", NULL);
  if (o.run_as && (o.uid == 0 || o.gid == 0))
    return execwrap_fail("--exec-trial: refusing to run a trial as root", NULL);
  int status = supervise_run(&o, argv + i);
  if (status == -ESRCH) return execwrap_fail("the worker is gone", NULL);
  if (status < 0) return execwrap_fail("cannot fork the trial", strerror(-status));
  supervise_exit(status);
}
