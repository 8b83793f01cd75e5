/* args: the ctune command line as a plain struct. Pure: no I/O, so unit tests
 * check every rule; the caller prints the message and exits with usage (2). */
#ifndef CTUNE_CLI_ARGS_H
#define CTUNE_CLI_ARGS_H

#include <stddef.h>

enum cli_cmd {
  CMD_NONE = 0,
  CMD_HELP,
  CMD_VERSION,
  CMD_RUN,
  CMD_SUBMIT,
  CMD_WATCH,
  CMD_STATUS,
  CMD_TRIALS,
  CMD_BEST,
  CMD_LOGS,
  CMD_CANCEL,
  CMD_EXPORT,
  CMD_TRIAL,
  /* a user's control of a live experiment: cli/control.c */
  CMD_PAUSE,
  CMD_RESUME,
  CMD_EXTEND,
  CMD_EDIT,
  CMD_STOP,
  CMD_DELETE,
  CMD_RELEASE_WORKER, /* an admin puts a quarantined worker back (cli/control.c) */
};

#define CLI_MAX_TAGS 32

struct cli_args {
  enum cli_cmd cmd;
  const char *command; /* the word as typed */
  const char *target;  /* CONFIG path, or EXP / TRIAL id as typed */
  long long id;        /* target parsed as an id (watch, trials, ...); 0: logs got a trial name */
  const char *server;  /* --server, else CTUNE_SERVER (filled by caller) */
  const char *token_file; /* --token-file */
  const char *ca_file;    /* --ca-file: CA bundle for an https:// server */
  const char *db;         /* run --db */
  int cpus;               /* run --cpus; 0 = this machine's */
  int gpus;               /* run --gpus; -1 = let the worker detect */
  int json;
  int resume;
  int dry_run;
  const char *metric, *mode, *scope; /* best */
  const char *format;                /* export: "csv" or "json" */
  const char *output;                /* export --output FILE; NULL = stdout */
  int pareto;                        /* export --pareto: the Pareto front */
  double interval_s;                 /* seconds between tables when not a terminal */
  int width;                         /* --width N; 0 = the terminal's */
  /* control: extend / edit / delete */
  long long num_samples;          /* extend --num-samples; 0: unchanged */
  double max_t;                   /* extend --max-t; 0: unchanged */
  long long max_concurrent;       /* edit --max-concurrent; -1: unchanged (0: unlimited) */
  double priority;                /* edit --priority; 0: unchanged */
  const char *notes;              /* edit --notes; NULL: unchanged */
  const char *tags[CLI_MAX_TAGS]; /* edit --tag T (repeated): the new tag list */
  int ntags;
  int force; /* delete --force */
};

/* Fills *a from argv (argv[0] is the program). Returns 0, or -EINVAL with a
 * one-line message in err naming the wrong word. */
int cli_args_parse(int argc, char **argv, struct cli_args *a, char *err, size_t errlen);

#endif
