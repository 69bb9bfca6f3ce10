// Package bench holds `make bench-compare`: wasmstream measured side by side with the raw
// franz-go ceiling and with goka (github.com/lovoo/goka), the Go stream-processing library a
// user would otherwise pick, on one in-process kfake cluster and the same records, in one
// process run; and the peak RSS of the wasmstream binary holding 1M keys and 1M timers. The goals
// table (goals_test.go) measures the counter against the hand-written loop and with its changelog
// against without, in interleaved repetitions on a broker in a child process (this test binary,
// run again with WASMSTREAM_BENCH_BROKER set), with medians and ranges.
//
// It is a module of its own so that goka and its dependencies (sarama, LevelDB) stay out of
// wasmstream's go.mod. The code is in BenchmarkCompare (compare_test.go):
//
//	cd bench && go test -mod=mod -count=1 -run '^$' -bench '^BenchmarkCompare$' -benchtime 1x -timeout 30m .
//
// BENCH_RECORDS sets the Kafka records per run (default 1000000) and BENCH_RSS_KEYS the keys and
// timers of the two memory rows (default 1000000, 0 leaves the rows out).
package bench
