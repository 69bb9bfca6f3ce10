package sched

import (
	"fmt"
	"testing"
	"time"
)

// FuzzScheduler interprets the input as a configuration and a sequence of operations, runs them
// through the model harness (which checks every batch, every error result and, after every
// operation, the scheduler's internal invariants and that Next leaves no ready key behind), and
// finally drains everything and checks that each item completed exactly once, in order per key.
func FuzzScheduler(f *testing.F) {
	f.Add([]byte{4, 2, 2, 3, 6, 2, 5, 0, 0, 0, 1, 1, 2, 3, 3, 5, 0, 4, 9})
	f.Add([]byte{1, 1, 1, 1, 4, 1, 4, 0, 1, 2, 0, 2, 3, 3, 3, 6, 0, 1, 3, 7, 1, 1, 3, 5, 0})
	f.Add([]byte{8, 4, 3, 0, 3, 6, 3, 0, 0, 0, 0, 0, 1, 0, 0, 2, 3, 3, 8, 1, 0, 3, 10, 0, 2, 11, 1, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 6 {
			return
		}
		high := 2 + int(data[4]%12)
		cfg := Config{
			MaxBatchItems:     1 + int(data[0]%8),
			MaxKeyItems:       1 + int(data[1]%4),
			MaxBatches:        1 + int(data[2]%3),
			MaxStreamInFlight: 1 + int(data[3]%6),
			HighItems:         high,
			LowItems:          1 + int(data[5])%(high-1),
			HighBytes:         400,
			LowBytes:          100,
			MaxKeyDepth:       1 + int(data[5]%5),
		}
		h := newHarness(t, cfg, true)
		for i := range uint32(3) {
			h.addStream(i)
		}
		ops := data[6:]
		for i := 0; i+2 < len(ops); i += 3 {
			a, b := ops[i+1], ops[i+2]
			stream := uint32(a % 3)
			key := fmt.Sprint("k", b%5)
			switch ops[i] % 12 {
			case 0, 1, 2:
				h.push(stream, key, int(b))
			case 3, 4:
				h.next()
			case 5, 6:
				if n := len(h.batchIDs); n > 0 {
					h.finish(h.batchIDs[int(a)%n], false, false)
				}
			case 7:
				if n := len(h.batchIDs); n > 0 {
					h.finish(h.batchIDs[int(a)%n], true, b&1 == 1)
				} else {
					h.finish(uint64(b), b&1 == 1, false) // unknown batch
				}
			case 8:
				until := time.Time{}
				if b%4 != 0 {
					until = h.now.Add(time.Duration(b%4) * time.Second)
				}
				h.delay(stream, key, until)
			case 9:
				h.now = h.now.Add(time.Duration(a%3) * time.Second)
				h.flow()
			case 10:
				h.remove(stream)
			case 11:
				h.addStream(stream)
			}
		}
		h.drain()
	})
}
