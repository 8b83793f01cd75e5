/* The ctune CLI's exit codes: documented in `ctune --help` and docs/cli.md. */
#ifndef CTUNE_CLI_EXITCODE_H
#define CTUNE_CLI_EXITCODE_H

enum cli_exit {
  CLI_EXIT_OK = 0,
  CLI_EXIT_ERROR = 1,         /* rejected request, failed experiment, I/O error */
  CLI_EXIT_USAGE = 2,         /* bad command line or config file */
  CLI_EXIT_UNREACHABLE = 3,   /* no server answers at the URL */
  CLI_EXIT_AUTH = 4,          /* 401/403: missing or wrong token */
  CLI_EXIT_NOT_FOUND = 5,     /* 404: unknown experiment or trial id */
  CLI_EXIT_TRIALS_FAILED = 6, /* `ctune run`: every trial of the experiment ended in ERROR */
  CLI_EXIT_INTERRUPTED = 130  /* Ctrl-C */
};

#endif
