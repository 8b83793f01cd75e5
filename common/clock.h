/* Time helpers: a monotonic clock for durations, the wall clock for records. */
#ifndef CTUNE_CLOCK_H
#define CTUNE_CLOCK_H

#include <stdint.h>

/* Monotonic seconds since an arbitrary start; never goes backwards. */
double clock_mono_s(void);
/* Monotonic milliseconds, for timers and deadlines. */
uint64_t clock_mono_ms(void);
/* Unix time in seconds with sub-second precision. */
double clock_wall_s(void);

#endif
