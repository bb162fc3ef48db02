# Thin wrapper over CMake: the README's commands. `make test` is what CI runs.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# Tests at once: two per core. Most of a test's time is spent waiting (for
# processes to start, for leases, timers and replies), not on a CPU; CTest
# starts the longest first (tests/CMakeLists.txt).
TEST_JOBS  ?= $(shell echo $$((2 * $(JOBS))))
CONFIG     ?= config/embedded.yaml

PREFIX     ?= /usr/local

.PHONY: deps build test test-plain test-asan test-valgrind run bench soak fuzz install clean

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@$(MAKE) --no-print-directory test-plain test-valgrind test-asan

test-plain:
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)

test-valgrind:
	scripts/valgrind_unit.sh $(BUILD)

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DWM_SANITIZE=ON -DWM_BENCH=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(TEST_JOBS)

run: build
	$(BUILD)/bin/store_master --config $(CONFIG)

bench: build
	@scripts/deps.sh bench
	@bench/run_all.sh $(BUILD)

# Long runs, not part of `make test`: random kills of the master and nodes and
# segment deletions under a weight workload for SOAK_SECONDS (every READY
# revision read back by SHA-256 and the cold files counted after each
# recovery); the same for SOAK_HA_SECONDS on three HA masters and a 3-member
# etcd (on TLS, its auth on, the masters logging in with a password), with
# kills, handoffs and pauses of the leader, its partition from
# etcd, kills of standbys, of one or every etcd member and of every master at
# once, SIGHUPs of every master, rotations of the etcd password; 500 SIGKILL
# points under load,
# then the weight lifecycle, upsert, node and fail-closed recovery tests ten
# times each.
SOAK_SECONDS ?= 600
SOAK_HA_SECONDS ?= 600
soak: build
	$(BUILD)/tests/soak_weights $(SOAK_SECONDS)
	$(BUILD)/tests/soak_weights --ha --etcd-auth $(SOAK_HA_SECONDS)
	WM_CRASH_ROUNDS=500 $(BUILD)/tests/test_crash_recovery
	cd $(BUILD) && ctest --output-on-failure --repeat until-fail:10 \
	  -R "test_weight_lifecycle|test_weight_upsert|test_nodes|test_recovery_fail_closed"

# Coverage-guided fuzzing with libFuzzer (clang), FUZZ_SECONDS per target;
# not part of `make test`, which runs every target's seeds and a fixed set of
# mutants instead. See tests/fuzz/README.md.
fuzz: build
	@scripts/deps.sh fuzz
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DWM_FUZZ=ON >/dev/null
	@tests/fuzz/run_libfuzzer.sh $(BUILD) $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The programs, libweightclient.so with weightclient.h and weightclient.pc,
# weight_mgmt.so (under lib/weight_mgmt/) and weightctl's bash completion,
# under PREFIX (default /usr/local; DESTDIR is honoured).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
