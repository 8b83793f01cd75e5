# Thin wrapper over CMake: `make demo` and `make test` are the README's two
# commands; each installs what it needs first (scripts/install-deps): the
# build and demo set, or with --test also the tools the tests drive (browser,
# libFuzzer, PyTorch, Slurm, venvs) when a goal below needs them. Decided from
# the goals, so that `deps` runs once, before the first configure (which looks
# for clang), even in `make build test` or with -j.
# build/: the programs as users get them (no tests, no test hooks);
# build-test/ and build-asan/: test builds (tests + hooks, common/testhook.h).
BUILD      ?= build
TEST_BUILD ?= build-test
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
ifneq ($(filter test test-fast fuzz bench,$(MAKECMDGOALS)),)
DEPS_FLAGS ?= --test
endif
ifneq ($(filter bench,$(MAKECMDGOALS)),)
export CTUNE_BENCH_DEPS = 1
endif

.PHONY: all deps build test-build asan demo test test-fast test-asan bench fuzz clean install package format

all: build

deps:
	./scripts/install-deps $(DEPS_FLAGS)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCTUNE_TESTHOOKS=OFF $(CMAKE_ARGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test-build: deps
	cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Release -DCTUNE_TESTHOOKS=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(TEST_BUILD) -j $(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCTUNE_SANITIZE=ON -DCTUNE_TESTHOOKS=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

demo: build
	./scripts/demo $(BUILD)

# The suite as two passes; a test's labels say which pass runs it, and
# each test runs once unless it is a unit test:
#   release pass:   unit, compute (CPU-bound training, 5-10x slower under
#                   ASan), browser, python, bench, fuzz, gpu, cuda (e2e
#                   tests of the CUDA build, which ASan builds never have)
#   sanitizer pass: unit, e2e (the real daemons, where ASan and UBSan also
#                   catch what a fault does to memory), chaos, fuzz
# slow marks the long ones (chaos, schemathesis, the 10,000-trial page) for
# `ctest -LE slow`. HACKING.md#test-labels has the table.
RELEASE_LABELS = unit|compute|browser|python|bench|fuzz|gpu|cuda
SANITIZE_SKIP = browser|bench|python|compute
test: test-build asan
	cd $(TEST_BUILD) && ctest --output-on-failure -j 2 -L '$(RELEASE_LABELS)'
	cd $(ASAN_BUILD) && ctest --output-on-failure -j 2 -LE '$(SANITIZE_SKIP)'

# The one C style (.clang-format, clang-format 14); ctest arch_format checks it.
format:
	git ls-files '*.c' '*.h' '*.cu' '*.cuh' | xargs clang-format -i --style=file

test-fast: test-build
	cd $(TEST_BUILD) && ctest --output-on-failure -j 2 -L unit

# The chaos test's long run: 32 faults instead of make test's 10 (about 2 min,
# under ASan; tests/chaos/test_chaos.py says what each fault does).
.PHONY: chaos-long
chaos-long: asan
	cd $(ASAN_BUILD) && CTUNE_CHAOS_FAULTS=32 ctest --output-on-failure -R '^chaos_faults$$'

# Every libFuzzer target (tests/fuzz/) for FUZZ_SECONDS each instead of the
# few seconds `make test` gives them; a crash stops here and names the input
# to keep in tests/fuzz/regress/<target>/.
FUZZ_SECONDS ?= 120
fuzz: test-build
	@ls $(TEST_BUILD)/fuzz/fuzz_* >/dev/null 2>&1 || { echo "make fuzz: no libFuzzer targets in $(TEST_BUILD)/fuzz (clang with libFuzzer not found)" >&2; exit 1; }
	@for bin in $(TEST_BUILD)/fuzz/fuzz_*; do t=$${bin##*/fuzz_}; echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  ./tests/fuzz/run-fuzz $$bin $$t tests/fuzz/corpus/$$t tests/fuzz/regress/$$t $(TEST_BUILD)/fuzz/work $(FUZZ_SECONDS) || exit 1; done

# The test build: some benchmarks drive its tools (tpe_driver, bench_fast_steps);
# its hooks cost nothing unless a CTUNE_TEST_ variable is set.
bench: test-build
	./bench/run-all $(TEST_BUILD)

# Installs the release build: programs in $(PREFIX)/bin, the dashboard in
# share/ctune/web, examples, docs and the systemd units (deploy/install.cmake);
# DESTDIR=/staging is honoured (cmake --install reads it).
PREFIX ?= /usr/local
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix $(PREFIX)

# The Debian package of the release build: $(BUILD)/ctune_VERSION_ARCH.deb.
package: build
	cd $(BUILD) && cpack -G DEB
	@ls $(BUILD)/ctune_*.deb

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(ASAN_BUILD)
