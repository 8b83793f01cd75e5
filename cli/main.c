/* ctune: the command-line client — dispatches to run (embedded server and
 * worker) or to the subcommands that talk to a running server. */
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "cli.h"
#include "exitcode.h"

static const char *const HELP =
    "usage: ctune COMMAND [ARGS] [OPTIONS]\n"
    "\n"
    "On this machine (starts its own ctune-server and ctune-worker):\n"
    "  run CONFIG [--db PATH] [--cpus N] [--gpus N] [--json] [--resume]\n"
    "      submit CONFIG, show progress until it ends, print the best trial.\n"
    "      The database defaults to ./ctune-results/<name>.db and is kept.\n"
    "      Ctrl-C (or SIGTERM/SIGHUP, or a kill) stops the trials and leaves\n"
    "      the experiment unfinished: run CONFIG --resume continues it. A second\n"
    "      Ctrl-C stops at once (trials killed; stored results stay).\n"
    "      `ctune cancel` ends an experiment for good.\n"
    "      Fails at once (exit 2) when its worker can never fit a trial's\n"
    "      resources_per_trial (e.g. \"gpu\": 0.5 on a machine without a GPU).\n"
    "      Exits 1 when the experiment ends CANCELLED (\"fail_fast\": true and a\n"
    "      trial failed for good, or `ctune cancel`), saying why, and 6 when it\n"
    "      ended with every trial in ERROR (no best trial is printed then).\n"
    "  sample CONFIG [--json]\n"
    "      validate CONFIG and list the trials it would create, here (no server\n"
    "      needed; the same output and errors as submit --dry-run). With\n"
    "      \"search_alg\": {\"type\": \"tpe\"} it lists the random startup trials\n"
    "      and says how many are decided later from results.\n"
    "      A conditional space (a choice whose options hold their own\n"
    "      parameters) lists only each trial's chosen option's parameters.\n"
    "      Examples: ctune sample examples/quick.json\n"
    "                ctune sample examples/conditional.json --json\n"
    "\n"
    "Against a running server (--server URL or CTUNE_SERVER, default\n"
    "http://127.0.0.1:8470; --token-file F or CTUNE_TOKEN when it needs one;\n"
    "--ca-file F or CTUNE_CA_FILE: the PEM CA that signed an https:// server's\n"
    "certificate, instead of the system store; https is always verified;\n"
    "--db DB: the server's token from DB.tokens, and for status, trials, trial,\n"
    "best, logs and export, when no server runs on DB, one started on it for\n"
    "the command, else the one on DB at the URL of DB.login-url:\n"
    "ctune status --db ctune-results/quick.db):\n"
    "  submit CONFIG [--dry-run] [--json]   store it (dry run: list its trials)\n"

    "  watch EXP [--json]                   progress until it ends (Ctrl-C:\n"
    "                                       stop watching; twice: at once)\n"
    "  status [--json]                      every experiment, one line each\n"
    "  trials EXP [--json]                  the trial table (ids, names and the\n"
    "                                       scheduler's last decision: reason)\n"
    "  trial TRIAL [--json]                 one trial: status, config, last result,\n"
    "                                       why it stopped/paused/was promoted, and\n"
    "                                       its history of decisions (PBT exploits\n"
    "                                       with donor and config change); TRIAL is\n"
    "                                       an id or a name: ctune trial quick_00003\n"
    "  best EXP [--metric M] [--mode min|max]\n"
    "           [--scope last|avg|last-5-avg|last-10-avg|all] [--json]\n"
    "      --metric other than the experiment's own needs --mode:\n"
    "      ctune best 1 --metric accuracy --mode max\n"
    "  logs TRIAL                           a trial's stdout and stderr; TRIAL is\n"
    "                                       an id or a name: ctune logs quick_00003\n"
    "  cancel EXP                           stop scheduling, stop running trials\n"
    "  pause EXP                            no trial starts; running ones stop with\n"
    "                                       their checkpoints (PAUSED)\n"
    "  resume EXP                           run again: paused trials continue from\n"
    "                                       their checkpoints, on any worker\n"
    "  extend EXP [--num-samples N] [--max-t T]\n"
    "      more trials (N up) or a higher fifo max_t; a finished experiment runs\n"
    "      again and trials that reached the old max_t resume from checkpoints:\n"
    "      ctune extend 1 --num-samples 20\n"
    "  edit EXP [--max-concurrent N] [--priority P] [--notes TEXT] [--tag T ...]\n"
    "      live: N 0 = unlimited; P > 0 is its fair share of workers (default\n"
    "      1); each --tag replaces the tag list: ctune edit 1 --priority 2 --tag lr\n"
    "  stop TRIAL                           end one trial (results and checkpoint\n"
    "                                       kept); TRIAL is an id or a name\n"
    "  delete EXP [--force]                 remove it with its results, checkpoints\n"
    "                                       and logs; --force: even while trials run\n"
    "  release-worker WORKER                put a quarantined worker back in service\n"
    "                                       (admin; the list: GET /api/v1/workers)\n"
    "  export EXP [--format csv|json] [--output FILE]\n"
    "  export EXP --pareto [--scope S]      the Pareto front (several objectives) as\n"
    "                                       csv or json, with its hypervolume (json)\n"
    "  export EXP --format tensorboard --output DIR   scalars + HParams for\n"
    "      TensorBoard, one run per trial: tensorboard --logdir DIR\n"
    "\n"
    "Display: --width N (default: the terminal's), --interval S (seconds\n"
    "between tables when stdout is not a terminal, default 10).\n"
    "\n"
    "Exit codes:\n"
    "  0    ok\n"
    "  1    error: request rejected, experiment failed, I/O error\n"
    "  2    usage: bad command line or config file\n"
    "  3    server unreachable\n"
    "  4    authentication: missing or wrong token (401/403)\n"
    "  5    not found: unknown experiment, trial id or trial name (404)\n"
    "  6    run: every trial of the experiment ended in ERROR\n"
    "  130  interrupted (Ctrl-C)\n";

int main(int argc, char **argv) {
  struct cli_args a;
  char err[512];
  if (cli_args_parse(argc, argv, &a, err, sizeof(err))) {
    fprintf(stderr, "ctune: %s\n", err);
    return CLI_EXIT_USAGE;
  }
  switch (a.cmd) {
  case CMD_NONE:
  case CMD_HELP:
    fputs(HELP, stdout);
    return CLI_EXIT_OK;
  case CMD_VERSION:
    puts("ctune 0.1.0");
    return CLI_EXIT_OK;
  case CMD_RUN:
    return cmd_run(&a);
  case CMD_SUBMIT:
    return cmd_submit(&a);
  case CMD_WATCH:
    return cmd_watch(&a);
  case CMD_STATUS:
    return cmd_status(&a);
  case CMD_TRIALS:
    return cmd_trials(&a);
  case CMD_BEST:
    return cmd_best(&a);
  case CMD_LOGS:
    return cmd_logs(&a);
  case CMD_CANCEL:
    return cmd_cancel(&a);
  case CMD_PAUSE:
    return cmd_pause(&a);
  case CMD_RESUME:
    return cmd_resume(&a);
  case CMD_EXTEND:
    return cmd_extend(&a);
  case CMD_EDIT:
    return cmd_edit(&a);
  case CMD_STOP:
    return cmd_stop(&a);
  case CMD_DELETE:
    return cmd_delete(&a);
  case CMD_EXPORT:
    return cmd_export(&a);
  case CMD_TRIAL:
    return cmd_trial(&a);
  case CMD_RELEASE_WORKER:
    return cmd_release_worker(&a);
  }
  return CLI_EXIT_USAGE;
}
