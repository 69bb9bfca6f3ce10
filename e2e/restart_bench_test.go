package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// BenchmarkRestartFirstOutput measures, through the real binary over a broker in its own
// process (`wasmstream dev --broker-only`), how long after a host killed with SIGKILL is started
// again its partitions produce outputs again: one host alone, and one of a group of three, with
// static and with dynamic group membership (session and rebalance timeouts 10 s). Records flow
// the whole time. It reports first_s (the first new output of any partition) and all_s (every
// output partition has a new one; in the group, the restarted host's partitions are the last).
//
//	go test ./e2e -run '^$' -bench RestartFirstOutput -benchtime 3x
func BenchmarkRestartFirstOutput(b *testing.B) {
	bin := guestbuild.Binary(b)
	module := guestbuild.Go(b, "wordcount")
	for _, n := range []int{1, 3} {
		for _, dynamic := range []bool{false, true} {
			b.Run(fmt.Sprintf("hosts=%d/dynamic=%t", n, dynamic), func(b *testing.B) {
				var first, all time.Duration
				for i := 0; i < b.N; i++ {
					f, a := restartOnce(b, bin, module, n, dynamic)
					first, all = first+f, all+a
					b.Logf("hosts=%d dynamic=%t: first new output %s, every partition %s after the restart", n, dynamic,
						f.Round(time.Millisecond), a.Round(time.Millisecond))
				}
				b.ReportMetric(first.Seconds()/float64(b.N), "first_s")
				b.ReportMetric(all.Seconds()/float64(b.N), "all_s")
			})
		}
	}
}

func restartOnce(b *testing.B, bin, module string, n int, dynamic bool) (first, all time.Duration) {
	b.StopTimer() // ns/op is not the figure: the metrics are
	dir := b.TempDir()
	port := freePort(b)
	startBroker(b, bin, filepath.Join(dir, "broker"), port, "words", "counts")
	brokers := "127.0.0.1:" + strconv.Itoa(port)
	hosts := make([]*hostProc, n)
	for i := range hosts {
		h := &hostProc{cfg: filepath.Join(dir, fmt.Sprintf("h%d.yaml", i)), data: filepath.Join(dir, fmt.Sprintf("h%d", i))}
		if err := os.WriteFile(h.cfg, []byte(wcHostConfig{data: h.data, brokers: brokers, module: module,
			session: "10s", rebalance: "10s", dynamic: dynamic}.yaml()), 0o644); err != nil {
			b.Fatal(err)
		}
		hosts[i] = h
	}
	defer func() {
		for _, h := range hosts {
			if h.cmd != nil {
				h.kill()
			}
		}
	}()
	logs := func() string {
		var s string
		for i, h := range hosts {
			s += fmt.Sprintf("--- host %d:\n%s\n", i, tail(h.logs.String(), 3000))
		}
		return s
	}
	owned := func() int {
		o := 0
		for _, h := range hosts {
			o += h.owned()
		}
		return o
	}
	for _, h := range hosts {
		h.start(b, bin)
	}
	waitFor(b, 2*time.Minute, "every partition owned", logs, func() bool {
		if owned() != 4 {
			return false
		}
		for _, h := range hosts {
			if h.owned() == 0 {
				return false
			}
		}
		return true
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := make(chan struct{})
	go func() { // records for every partition, all along
		defer close(produced)
		for i := 0; ctx.Err() == nil; i++ {
			recs := make([]*kgo.Record, 0, 100)
			for j := range 100 {
				recs = append(recs, &kgo.Record{Topic: "words", Key: fmt.Appendf(nil, "user%03d", (i*100+j)%400), Value: []byte("w01 w02")})
			}
			cl.ProduceSync(ctx, recs...)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-produced }()
	waitNewOutputs(brokers, time.Minute)

	victim := hosts[0]
	victim.kill()
	restart := time.Now()
	victim.start(b, bin)
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "counts")
	if err != nil {
		b.Fatal(err)
	}
	from := map[string]map[int32]kgo.Offset{"counts": {}}
	ends.Each(func(o kadm.ListedOffset) { from["counts"][o.Partition] = kgo.NewOffset().At(o.Offset) })
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(from))
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	seen := map[int32]bool{}
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer rcancel()
	for len(seen) < 4 {
		fs := rd.PollFetches(rctx)
		if rctx.Err() != nil {
			b.Fatalf("outputs of %d of 4 partitions after the restart; the logs:\n%s", len(seen), logs())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if first == 0 {
				first = time.Since(restart)
			}
			seen[r.Partition] = true
		})
	}
	return first, time.Since(restart)
}
