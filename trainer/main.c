/* ctune-train's entry point: flags, signals, the error line and exit code. */
#include <cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "datacache.h"
#include "tb.h"
#include "jsonout.h"
#include "exit_codes.h"
#include "log.h"
#include "train.h"
#include "cuda_plugin.h"

#ifndef CTUNE_VERSION
#define CTUNE_VERSION "0.0.0"
#endif

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

/* One JSON line on stderr: {"error": {"code", "message", "exit_code"}}. */
static void print_error(int code, const char *msg) {
  cJSON *root = cJSON_CreateObject();
  cJSON *e = root ? cJSON_AddObjectToObject(root, "error") : NULL;
  char *text = NULL;
  if (e && cJSON_AddStringToObject(e, "code", train_exit_name(code)) &&
      cJSON_AddStringToObject(e, "message", msg) && cJSON_AddNumberToObject(e, "exit_code", code))
    text = jsonout_print(root);
  if (text)
    fprintf(stderr, "%s\n", text);
  else /* out of memory: still say something parseable */
    fprintf(stderr, "{\"error\": {\"code\": \"%s\", \"exit_code\": %d}}\n", train_exit_name(code),
            code);
  cJSON_free(text);
  cJSON_Delete(root);
}

int main(int argc, char **argv) {
  log_set_program("ctune-train");
#ifdef CTUNE_TRAIN_CUDA_PLUGIN_FILE
  /* a test build of ctune-train with its own CUDA double */
  cuda_plugin_set_file(CTUNE_TRAIN_CUDA_PLUGIN_FILE);
#endif
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  struct train_config cfg;
  char err[1024] = "";
  const char *tb_dir = NULL;
  config_defaults(&cfg);
  if (train_tb_take_flag(&argc, argv, &tb_dir, err, sizeof(err)) != 0 ||
      datacache_take_flag(&argc, argv, err, sizeof(err)) != 0 ||
      config_parse_args(&cfg, argc, argv, err, sizeof(err)) != 0 ||
      config_validate(&cfg, err, sizeof(err)) != 0) {
    print_error(TRAIN_EXIT_USAGE, err);
    return TRAIN_EXIT_USAGE;
  }
  /* at one thread, before the data loads: OpenBLAS's idle workers would
   * spin on sched_yield meanwhile (the CPU backend shuts them down too,
   * later; with --threads N > 1 they are left as OpenBLAS keeps them) */
  if (cfg.threads == 1) backend_cpu_blas_idle();
  if (cfg.show_help) {
    fputs(config_usage(), stdout);
    fputs(datacache_usage(), stdout);
    fputs(train_tb_usage(), stdout);
    return TRAIN_EXIT_OK;
  }
  if (cfg.show_version) {
    /* --version is asked for by people and the worker: on stdout, one line */
    printf("ctune-train %s (backends: %s)\n", CTUNE_VERSION, train_backends_built());
    return TRAIN_EXIT_OK;
  }
  struct train_tb *tb = NULL;
  if (tb_dir) {
    if (train_tb_open(&tb, tb_dir, cfg.lr, err, sizeof(err)) != 0) {
      print_error(TRAIN_EXIT_USAGE, err);
      return TRAIN_EXIT_USAGE;
    }
    report_set_observer(&(struct report_observer){train_tb_epoch, tb});
  }
  int code = train_run(&cfg, &stop_requested, stdout, err, sizeof(err));
  report_set_observer(NULL);
  if (train_tb_close(tb) != 0)
    log_warn("the TensorBoard event file in %s may be incomplete", tb_dir);
  if (code != TRAIN_EXIT_OK) {
    log_error("%s", err);
    print_error(code, err);
  }
  return code;
}
