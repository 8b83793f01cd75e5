/* secret: comparing credentials (tokens, worker secrets) without telling an
 * attacker, by timing, where a guess went wrong. */
#ifndef CTUNE_SECRET_H
#define CTUNE_SECRET_H

/* 1 when a and b are equal strings, in time independent of where they
 * differ (it walks the longer of the two). */
int secret_equal(const char *a, const char *b);

#endif
