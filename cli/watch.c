/* watch: polls an experiment and shows the reporter — redrawn in place on a
 * terminal; otherwise a table every interval plus a line per trial event;
 * or JSON lines. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "jsonout.h"
#include "clock.h"

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
  nanosleep(&ts, NULL); /* a signal ends it early, which is what we want */
}

static int count_lines(const char *t) {
  int n = 0;
  for (; *t; t++) n += *t == '\n';
  return n;
}

static int print_json_state(const struct report_state *s, double now) {
  cJSON *j = report_to_json(s, now);
  char *txt = j ? jsonout_print(j) : NULL;
  cJSON_Delete(j);
  if (!txt) return -ENOMEM;
  printf("%s\n", txt);
  fflush(stdout);
  free(txt);
  return 0;
}

static int exp_running(const struct report_state *s) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(s->experiment, "status");
  /* PAUSED (issue 14) is not an end: `ctune resume` continues it. */
  return cJSON_IsString(st) &&
         (!strcmp(st->valuestring, "RUNNING") || !strcmp(st->valuestring, "PAUSED"));
}

int cli_watch(struct http_client *c, long long id, const struct watch_opts *o,
              struct report_state *final, struct http_error *err) {
  struct report_state prev, cur;
  int have_prev = 0, drawn_lines = 0, rc = 0;
  double last_table = -1e9, last_json = -1e9;
  long long last_json_seq = -2;
  memset(&prev, 0, sizeof(prev));
  memset(&cur, 0, sizeof(cur));
  for (;;) {
    if (cli_signal) {
      rc = -EINTR;
      break;
    }
    if (o->check && (rc = o->check(o->check_ctx))) break;
    rc = cli_fetch_state(c, id, &cur, err);
    if (rc) {
      if (rc == HTTP_ERR_UNREACHABLE && cli_signal) rc = -EINTR;
      break;
    }
    double now = clock_wall_s(), mono = clock_mono_s();
    int running = exp_running(&cur);
    if (o->json) {
      if (!running || cur.last_seq != last_json_seq || mono - last_json >= o->interval_s) {
        if ((rc = print_json_state(&cur, now))) break;
        last_json = mono;
        last_json_seq = cur.last_seq;
      }
    } else if (o->tty) {
      /* The terminal may have been resized since the last draw. */
      struct winsize ws;
      int width = o->width, height = 0;
      if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
        if (!o->fixed_width && ws.ws_col >= 20) width = ws.ws_col;
        height = ws.ws_row;
      }
      char *text;
      if ((rc = report_render(&cur, now, width, REPORT_MAX_ROWS, &text))) break;
      int lines = count_lines(text);
      /* Cursor-up cannot reach above the screen: taller output, or a taller
       * previous draw, gets a cleared screen instead. */
      if (drawn_lines && height > 0 && (lines >= height || drawn_lines >= height))
        fputs("\033[H\033[2J", stdout);
      else if (drawn_lines)
        printf("\033[%dA\033[J", drawn_lines);
      fputs(text, stdout);
      fflush(stdout);
      drawn_lines = lines;
      free(text);
    } else {
      char *ev;
      if ((rc = report_events(have_prev ? &prev : NULL, &cur, &ev))) break;
      fputs(ev, stdout);
      free(ev);
      if (!running || mono - last_table >= o->interval_s) {
        char *text;
        if ((rc = report_render(&cur, now, o->width, REPORT_MAX_ROWS, &text))) break;
        printf("%s\n", text);
        free(text);
        last_table = mono;
      }
      fflush(stdout);
    }
    if (have_prev) report_state_free(&prev);
    prev = cur;
    have_prev = 1;
    memset(&cur, 0, sizeof(cur));
    if (!running) break;
    sleep_s(1.0);
  }
  report_state_free(&cur);
  if (final && have_prev)
    *final = prev;
  else if (have_prev)
    report_state_free(&prev);
  return rc;
}
