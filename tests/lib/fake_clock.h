/* fake_clock: time as a test's INPUT. Linking fake_clock.c into a test
 * executable replaces common/clock.c: its clock_mono_ms / clock_mono_s /
 * clock_wall_s are defined by the executable's own object, so the linker
 * never pulls clock.o out of libctune_common.a (a second definition would
 * be a link error, not a silent choice). Every caller in the libraries the
 * test links (the state layer, the commit thread's timings, workers) then
 * reads the value set here. No sleeps: a test moves the clock. */
#ifndef CTUNE_TEST_FAKE_CLOCK_H
#define CTUNE_TEST_FAKE_CLOCK_H

#include <stdint.h>

/* The monotonic clock a test starts from (not 0: the state code reads 0
 * as "not set yet" in several places). */
#define FAKE_CLOCK_START_MS 1000000ull
/* The wall clock at monotonic 0 (seconds): wall = base + mono. */
#define FAKE_CLOCK_WALL_BASE_S 1700000000.0

/* Sets the monotonic clock (milliseconds). */
void fake_clock_set_ms(uint64_t ms);
/* Moves it forward by ms and returns the new value. */
uint64_t fake_clock_advance_ms(uint64_t ms);
/* The value clock_mono_ms() now returns. */
uint64_t fake_clock_now_ms(void);
/* How many times the fake was called (to check that the code under test
 * really reads it: the link replaced the real clock). */
uint64_t fake_clock_calls(void);

#endif
