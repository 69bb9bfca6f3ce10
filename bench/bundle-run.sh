#!/bin/sh
# Runs wasmstream's benchmarks from a bundle that `make bench-bundle` made: static test binaries
# and prebuilt guest modules, for a Linux x86-64 machine with no Go, Rust or network.
#
#   ./run.sh                       # the sweep below, GOMAXPROCS 1 2 4 8 16
#   PROCS="1 16" ./run.sh          # other GOMAXPROCS values
#   BENCH_RECORDS=300000 ./run.sh  # fewer Kafka records per run (default 1000000)
#
# Each GOMAXPROCS value runs the comparison table (wasmstream's Go and Rust guests, goka, the
# hand-written franz-go + map + Badger loop, raw franz-go) and the Kafka pipeline benchmark
# (no-op and counter guests against raw franz-go on the same in-process broker). Then one run
# of the sweep table: the counter and the CPU-heavy guest (Go and Rust), 4 and 16 partitions,
# at every GOMAXPROCS value up to the machine's cores (BENCH_PROCS, default all: 1 2 4 8 16),
# with the scaling factors against GOMAXPROCS 1, each with one task loop and with as many loops
# as partitions (tasks[].loops; BENCH_LOOPS, default "1 16", each capped at the partitions) and
# the rate against one loop. BENCH_SWEEP=counter/go,... picks the task and guest pairs. Between
# them, the goals table at the machine's GOMAXPROCS: the counter's CPU per record against the
# hand-written loop's and with its changelog against without, BENCH_GOAL_REPS (default 5)
# interleaved repetitions on a broker in a child process, medians and ranges. Output
# goes to standard output; keep it with `./run.sh | tee results.txt`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export WASMSTREAM_GUEST_DIR="$here/guests"
export BENCH_RSS_KEYS="${BENCH_RSS_KEYS:-0}"
cd "$here"
echo "bundle: $(cat "$here/VERSION" 2>/dev/null || echo unknown); $(nproc) cores; $(uname -m)"
for p in ${PROCS:-1 2 4 8 16}; do
	echo "== GOMAXPROCS=$p"
	BENCH_TABLES=compare GOMAXPROCS=$p ./bench.test -test.run '^$' -test.bench '^BenchmarkCompare$' -test.benchtime 1x -test.timeout 60m
	GOMAXPROCS=$p ./host.test -test.run '^$' -test.bench '^BenchmarkKafkaPipeline$' -test.benchtime 1x -test.timeout 60m
done
echo "== goals 2 and 3: the counter against the hand-written loop, changelog on against off (interleaved repetitions, broker in a child process)"
BENCH_TABLES=goals ./bench.test -test.run '^$' -test.bench '^BenchmarkCompare$' -test.benchtime 1x -test.timeout 60m
echo "== GOMAXPROCS sweep"
BENCH_TABLES=sweep BENCH_PROCS="${BENCH_PROCS:-all}" BENCH_LOOPS="${BENCH_LOOPS:-1 16}" ./bench.test -test.run '^$' -test.bench '^BenchmarkCompare$' -test.benchtime 1x -test.timeout 60m
