/* args: parses `ctune COMMAND [ARG] [OPTIONS]` into struct cli_args, checking
 * which options each command takes and the values of enumerated options. */
#include "args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cmd_info {
  const char *name;
  enum cli_cmd cmd;
  const char *arg;  /* name of the positional argument, NULL = none */
  int arg_is_id;    /* 1: an id; 2: an id or a trial's name */
  const char *opts; /* options this command accepts, space-separated */
};

/* --db DB: the server runs here on DB; its admin token is read from DB.tokens
 * (the reading commands start one on DB when none runs: cli_connect). */
static const char *const REMOTE = "--server --token-file --ca-file --db ";

static const struct cmd_info CMDS[] = {
    {"run", CMD_RUN, "CONFIG", 0, "--db --cpus --gpus --json --resume --interval --width"},
    {"submit", CMD_SUBMIT, "CONFIG", 0, "--dry-run --json"},
    {"sample", CMD_SUBMIT, "CONFIG", 0, "--json"}, /* submit --dry-run */
    {"watch", CMD_WATCH, "EXP", 1, "--json --interval --width"},
    {"status", CMD_STATUS, NULL, 0, "--json --width"},
    {"trials", CMD_TRIALS, "EXP", 1, "--json --width"},
    {"best", CMD_BEST, "EXP", 1, "--metric --mode --scope --json"},
    {"logs", CMD_LOGS, "TRIAL", 2, ""},
    {"trial", CMD_TRIAL, "TRIAL", 2, "--json"},
    {"cancel", CMD_CANCEL, "EXP", 1, "--json"},
    {"export", CMD_EXPORT, "EXP", 1, "--format --output --pareto --scope"},
    /* a user's control of a live experiment (cli/control.c) */
    {"pause", CMD_PAUSE, "EXP", 1, "--json"},
    {"resume", CMD_RESUME, "EXP", 1, "--json"},
    {"extend", CMD_EXTEND, "EXP", 1, "--num-samples --max-t --json"},
    {"edit", CMD_EDIT, "EXP", 1, "--max-concurrent --priority --notes --tag --json"},
    {"stop", CMD_STOP, "TRIAL", 2, "--json"},
    {"delete", CMD_DELETE, "EXP", 1, "--force --json"},
    {"release-worker", CMD_RELEASE_WORKER, "WORKER", 1, "--json"},
    {"help", CMD_HELP, NULL, 0, ""},
    {"version", CMD_VERSION, NULL, 0, ""},
};

static int word_in(const char *list, const char *word) {
  size_t n = strlen(word);
  if (n == 0) return 0;
  for (const char *p = list; (p = strstr(p, word)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
  return 0;
}

static int parse_id(const char *s, long long *out) {
  if (!s || !*s) return -EINVAL;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v <= 0) return -EINVAL;
  *out = v;
  return 0;
}

/* The characters of an experiment (so also a trial) name on the server. */
static int name_ok(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > 160) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == '.' || *s == '-'))
      return 0;
  return 1;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || errno || *end || v < lo || v > hi) return -EINVAL;
  *out = (int)v;
  return 0;
}

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    snprintf(err, errlen, __VA_ARGS__);                                                            \
    return -EINVAL;                                                                                \
  } while (0)

int cli_args_parse(int argc, char **argv, struct cli_args *a, char *err, size_t errlen) {
  memset(a, 0, sizeof(*a));
  a->gpus = -1;
  a->interval_s = 10.0;
  a->max_concurrent = -1;
  if (errlen) err[0] = '\0';
  if (argc < 2) {
    a->cmd = CMD_HELP;
    return 0;
  }
  const char *word = argv[1];
  if (!strcmp(word, "--help") || !strcmp(word, "-h")) word = "help";
  if (!strcmp(word, "--version")) word = "version";
  const struct cmd_info *ci = NULL;
  for (size_t i = 0; i < sizeof(CMDS) / sizeof(CMDS[0]); i++)
    if (!strcmp(CMDS[i].name, word)) ci = &CMDS[i];
  if (!ci) FAIL("unknown command '%s' (see ctune --help)", argv[1]);
  a->cmd = ci->cmd;
  a->command = ci->name;
  int remote = ci->cmd != CMD_RUN && ci->cmd != CMD_HELP && ci->cmd != CMD_VERSION;

  for (int i = 2; i < argc; i++) {
    const char *w = argv[i];
    if (!strcmp(w, "--help") || !strcmp(w, "-h")) {
      a->cmd = CMD_HELP;
      return 0;
    }
    if (w[0] != '-' || w[1] == '\0') {
      if (!ci->arg || a->target) FAIL("%s: unexpected argument '%s'", ci->name, w);
      a->target = w;
      continue;
    }
    /* --opt=value is the same as --opt value */
    char name[32];
    const char *val = NULL;
    const char *eq = strchr(w, '=');
    size_t nlen = eq ? (size_t)(eq - w) : strlen(w);
    if (nlen >= sizeof(name)) FAIL("%s: unknown option '%s'", ci->name, w);
    memcpy(name, w, nlen);
    name[nlen] = '\0';
    if (eq) val = eq + 1;
    int known = word_in(ci->opts, name) || (remote && word_in(REMOTE, name));
    if (!known) FAIL("%s: unknown option '%s' (see ctune --help)", ci->name, name);

    int is_flag = !strcmp(name, "--json") || !strcmp(name, "--resume") ||
                  !strcmp(name, "--dry-run") || !strcmp(name, "--force") ||
                  !strcmp(name, "--pareto");
    if (is_flag) {
      if (val) FAIL("%s: option %s takes no value", ci->name, name);
      if (!strcmp(name, "--json"))
        a->json = 1;
      else if (!strcmp(name, "--resume"))
        a->resume = 1;
      else if (!strcmp(name, "--force"))
        a->force = 1;
      else if (!strcmp(name, "--pareto"))
        a->pareto = 1;
      else
        a->dry_run = 1;
      continue;
    }
    if (!val) {
      if (i + 1 >= argc) FAIL("%s: option %s needs a value", ci->name, name);
      val = argv[++i];
    }
    if (!strcmp(name, "--server")) {
      if (strncmp(val, "http://", 7) && strncmp(val, "https://", 8))
        FAIL("%s: --server '%s' must start with http:// or https://", ci->name, val);
      a->server = val;
    } else if (!strcmp(name, "--token-file")) {
      a->token_file = val;
    } else if (!strcmp(name, "--ca-file")) {
      if (!*val) FAIL("%s: --ca-file needs a file name", ci->name);
      a->ca_file = val;
    } else if (!strcmp(name, "--db")) {
      if (!*val) FAIL("%s: --db needs a path", ci->name);
      a->db = val;
    } else if (!strcmp(name, "--cpus")) {
      if (parse_int(val, 1, 4096, &a->cpus))
        FAIL("%s: --cpus '%s' must be a whole number from 1 to 4096", ci->name, val);
    } else if (!strcmp(name, "--gpus")) {
      if (parse_int(val, 0, 1024, &a->gpus))
        FAIL("%s: --gpus '%s' must be a whole number from 0 to 1024", ci->name, val);
    } else if (!strcmp(name, "--metric")) {
      if (!*val) FAIL("%s: --metric needs a name", ci->name);
      a->metric = val;
    } else if (!strcmp(name, "--mode")) {
      if (strcmp(val, "min") && strcmp(val, "max"))
        FAIL("%s: --mode '%s' must be min or max", ci->name, val);
      a->mode = val;
    } else if (!strcmp(name, "--scope")) {
      if (!word_in("last avg last-5-avg last-10-avg all", val) || strchr(val, ' '))
        FAIL("%s: --scope '%s' must be one of last, avg, last-5-avg, last-10-avg, all", ci->name,
             val);
      a->scope = val;
    } else if (!strcmp(name, "--format")) {
      if (strcmp(val, "csv") && strcmp(val, "json") && strcmp(val, "tensorboard"))
        FAIL("%s: --format '%s' must be csv, json or tensorboard", ci->name, val);
      a->format = val;
    } else if (!strcmp(name, "--output")) {
      if (!*val) FAIL("%s: --output needs a file name", ci->name);
      a->output = val;
    } else if (!strcmp(name, "--interval")) {
      char *end;
      double v = strtod(val, &end);
      if (!*val || *end || !(v >= 0.2 && v <= 3600))
        FAIL("%s: --interval '%s' must be seconds from 0.2 to 3600", ci->name, val);
      a->interval_s = v;
    } else if (!strcmp(name, "--num-samples")) {
      char *end;
      errno = 0;
      long long v = strtoll(val, &end, 10);
      if (!*val || *end || errno || v < 1 || v > 100000)
        FAIL("%s: --num-samples '%s' must be a whole number from 1 to 100000", ci->name, val);
      a->num_samples = v;
    } else if (!strcmp(name, "--max-t")) {
      char *end;
      double v = strtod(val, &end);
      if (!*val || *end || !(v > 0 && v < 1e300))
        FAIL("%s: --max-t '%s' must be a number > 0", ci->name, val);
      a->max_t = v;
    } else if (!strcmp(name, "--max-concurrent")) {
      int v;
      if (parse_int(val, 0, 1000000000, &v))
        FAIL("%s: --max-concurrent '%s' must be a whole number >= 0 (0: unlimited)", ci->name, val);
      a->max_concurrent = v;
    } else if (!strcmp(name, "--priority")) {
      char *end;
      double v = strtod(val, &end);
      if (!*val || *end || !(v > 0 && v <= 1e6))
        FAIL("%s: --priority '%s' must be a number in (0, 1000000]", ci->name, val);
      a->priority = v;
    } else if (!strcmp(name, "--notes")) {
      if (strlen(val) > 4096) FAIL("%s: --notes is longer than 4096 bytes", ci->name);
      a->notes = val;
    } else if (!strcmp(name, "--tag")) {
      size_t n = strlen(val);
      if (n < 1 || n > 64) FAIL("%s: --tag '%s' must be 1 to 64 bytes", ci->name, val);
      if (a->ntags == CLI_MAX_TAGS) FAIL("%s: at most %d --tag", ci->name, CLI_MAX_TAGS);
      a->tags[a->ntags++] = val;
    } else if (!strcmp(name, "--width")) {
      if (parse_int(val, 20, 10000, &a->width))
        FAIL("%s: --width '%s' must be a whole number from 20 to 10000", ci->name, val);
    }
  }
  if (ci->arg && !a->target) FAIL("%s: missing %s (see ctune --help)", ci->name, ci->arg);
  if (ci->arg_is_id == 2 && parse_id(a->target, &a->id)) {
    /* A trial's name (experiment name + "_NNNNN"): resolved by the command. */
    a->id = 0;
    if (!name_ok(a->target))
      FAIL("%s: %s '%s' must be a trial id (a positive whole number) or a trial name "
           "such as quick_00003",
           ci->name, ci->arg, a->target);
  } else if (ci->arg_is_id == 1 && parse_id(a->target, &a->id)) {
    FAIL("%s: %s '%s' must be a positive whole number", ci->name, ci->arg, a->target);
  }
  if (a->cmd == CMD_EXPORT && !a->format) a->format = "csv";
  if (a->cmd == CMD_EXPORT && a->pareto && !strcmp(a->format, "tensorboard"))
    FAIL("export: --pareto writes csv or json, not tensorboard");
  if (a->cmd == CMD_EXPORT && a->scope && !a->pareto)
    FAIL("export: --scope goes with --pareto (the front under that scope)");
  if (a->cmd == CMD_EXTEND && !a->num_samples && !(a->max_t > 0))
    FAIL("extend: give --num-samples N and/or --max-t T");
  if (a->cmd == CMD_EDIT && a->max_concurrent < 0 && !(a->priority > 0) && !a->notes && !a->ntags)
    FAIL("edit: give --max-concurrent, --priority, --notes and/or --tag");
  if (!strcmp(ci->name, "sample")) a->dry_run = 1;
  return 0;
}
