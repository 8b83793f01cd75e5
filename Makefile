# Thin wrapper over CMake: `make demo` and `make test` are the README's two
# commands; each installs what it needs first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps build asan demo test test-fast test-asan bench clean

all: build

deps:
	./scripts/install-deps

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCTUNE_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

demo: build
	./scripts/demo $(BUILD)

# The whole suite on the release build, then again under ASan and UBSan
# (browser tests only once: they test the page, not the C).
test: build asan
	cd $(BUILD) && ctest --output-on-failure -j 2
	cd $(ASAN_BUILD) && ctest --output-on-failure -j 2 -LE 'browser|bench'

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j 2 -L unit

bench: build
	CTUNE_BENCH_DEPS=1 ./scripts/install-deps
	./bench/run-all $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
