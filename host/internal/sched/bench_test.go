package sched

import (
	"fmt"
	"testing"
)

// BenchmarkPushNextComplete measures the scheduler's cost per item (ns/op is per item): items
// are pushed round robin over 10,000 keys of 4 streams (256 keys for "deep", so that keys queue
// several items), and every 1,024 pushes batches are formed and completed until the queues are
// empty.
func BenchmarkPushNextComplete(b *testing.B) {
	for _, bc := range []struct {
		name string
		keys int
		cfg  Config
	}{
		{"defaults", 10_000, Config{}},
		{"deep", 256, Config{}},
		{"batch=16", 10_000, Config{MaxBatchItems: 16, MaxKeyItems: 4}},
		{"strict", 10_000, Config{MaxStreamInFlight: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			keys, streams := bc.keys, 4
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprint("key-", i)
			}
			s, err := New[int](bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			for i := range uint32(streams) {
				s.AddStream(i)
			}
			drain := func() {
				for {
					bt, ok := s.Next(epoch)
					if !ok {
						return
					}
					s.Complete(bt.ID)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := i % keys
				s.Push(Item[int]{Stream: uint32(k % streams), Key: names[k], Offset: int64(i), Size: 100, Value: i})
				i++
				if i%1024 == 0 {
					drain()
				}
			}
			drain()
		})
	}
}
