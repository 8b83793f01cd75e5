/* fake_clock: common/clock.h's three functions over a settable value
 * (fake_clock.h). Atomics: the commit thread reads the clock too. */
#include "fake_clock.h"

#include "clock.h"

static uint64_t fake_now_ms = FAKE_CLOCK_START_MS;
static uint64_t fake_calls;

void fake_clock_set_ms(uint64_t ms) { __atomic_store_n(&fake_now_ms, ms, __ATOMIC_SEQ_CST); }

uint64_t fake_clock_advance_ms(uint64_t ms) {
  return __atomic_add_fetch(&fake_now_ms, ms, __ATOMIC_SEQ_CST);
}

uint64_t fake_clock_now_ms(void) { return __atomic_load_n(&fake_now_ms, __ATOMIC_SEQ_CST); }

uint64_t fake_clock_calls(void) { return __atomic_load_n(&fake_calls, __ATOMIC_SEQ_CST); }

uint64_t clock_mono_ms(void) {
  __atomic_add_fetch(&fake_calls, 1, __ATOMIC_SEQ_CST);
  return fake_clock_now_ms();
}

double clock_mono_s(void) {
  __atomic_add_fetch(&fake_calls, 1, __ATOMIC_SEQ_CST);
  return (double)fake_clock_now_ms() / 1000.0;
}

double clock_wall_s(void) {
  __atomic_add_fetch(&fake_calls, 1, __ATOMIC_SEQ_CST);
  return FAKE_CLOCK_WALL_BASE_S + (double)fake_clock_now_ms() / 1000.0;
}
