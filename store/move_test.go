package store

import (
	"fmt"
	"testing"
)

// TestMoveStream moves a stream with state, marks, timers and a position to another task in
// transactions of a few entries each: the destination holds all of it, the source nothing,
// and a second stream of the source is untouched.
func TestMoveStream(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true, MaxTxnEntries: 7})
	a := mustStreamID(t, db, "wc", "kafka:words/0")
	b := mustStreamID(t, db, "wc", "kafka:words/1")
	cp := &Checkpoint{Task: "wc"}
	for _, s := range []uint32{a, b} {
		for i := range 20 {
			cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: fmt.Appendf(nil, "k%02d", i), Mark: int64(i), StateVersion: 3,
				Writes: []Write{{Name: []byte("n"), Value: fmt.Appendf(nil, "%d", i)}},
				Timers: []TimerOp{{Name: []byte("t"), Domain: 1, Due: int64(1000 + i), Payload: []byte("p")}}})
		}
		cp.Positions = append(cp.Positions, StreamPosition{Stream: s, Position: Position{Next: 20, Horizon: 19, Resume: 77, Watermark: 5}})
	}
	mustCommit(t, db, cp)

	to := mustStreamID(t, db, "wc.reset-1", "kafka:words/0")
	m, err := db.MoveStream("wc", a, "wc.reset-1", to)
	if err != nil {
		t.Fatalf("MoveStream: %v", err)
	}
	if m.Keys != 20 || m.Timers != 20 || !m.HadPosition || m.Position.Next != 20 {
		t.Fatalf("moved %+v, want 20 keys, 20 timers, position at 20", m)
	}
	if _, ok, _ := db.Position("wc", a); ok {
		t.Fatal("the source stream still has a position")
	}
	if v, ok, _ := db.Get("wc", a, []byte("k03"), []byte("n")); ok {
		t.Fatalf("the source stream still has state: %q", v)
	}
	if n, _ := db.TimerCount("wc", a); n != 0 {
		t.Fatalf("the source stream still has %d timers", n)
	}
	if p, ok, _ := db.Position("wc.reset-1", to); !ok || p != (Position{Next: 20, Horizon: 19, Resume: 77, Watermark: 5}) {
		t.Fatalf("destination position %+v %v", p, ok)
	}
	if v, ok, _ := db.Get("wc.reset-1", to, []byte("k03"), []byte("n")); !ok || string(v) != "3" {
		t.Fatalf("destination k03/n = %q %v, want 3", v, ok)
	}
	if mk, sv, ok, _ := db.MarkInfo("wc.reset-1", to, []byte("k07")); !ok || mk != 7 || sv != 3 {
		t.Fatalf("destination mark of k07 = %d v%d %v, want 7 v3", mk, sv, ok)
	}
	var due []Timer
	if _, _, err := db.DueTimers("wc.reset-1", to, 1, 1005, nil, 100, func(tm Timer) bool { due = append(due, tm); return true }); err != nil {
		t.Fatal(err)
	}
	if len(due) != 6 {
		t.Fatalf("%d timers of the destination due by 1005, want 6", len(due))
	}
	if v, ok, _ := db.Get("wc", b, []byte("k03"), []byte("n")); !ok || string(v) != "3" {
		t.Fatalf("the other stream lost its state: %q %v", v, ok)
	}

	if err := db.SetReplay("wc", a, &Replay{From: 0, Head: 20, At: 5}); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := db.ReplayOf("wc", a); err != nil || !ok || r != (Replay{0, 20, 5}) {
		t.Fatalf("ReplayOf = %+v %v %v", r, ok, err)
	}
	if err := db.SetReplay("wc", a, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.ReplayOf("wc", a); ok {
		t.Fatal("a cleared replay is still there")
	}
	if err := db.DropTask("wc.reset-1"); err != nil {
		t.Fatalf("DropTask: %v", err)
	}
	tasks, err := db.Tasks()
	if err != nil || len(tasks) != 1 || tasks[0] != "wc" {
		t.Fatalf("tasks after DropTask: %q %v, want [wc]", tasks, err)
	}
	if _, ok, _ := db.Get("wc.reset-1", to, []byte("k03"), []byte("n")); ok {
		t.Fatal("the dropped task still has state")
	}
}

// BenchmarkMoveStream moves a stream of 100,000 keys, each with a value, a timer and a mark (what
// `wasmstream reset` does per stream): go test ./store -run '^$' -bench MoveStream -benchtime 1x
func BenchmarkMoveStream(b *testing.B) {
	const keys = 100_000
	for range b.N {
		b.StopTimer()
		db := openTestDB(b, Options{})
		a := mustStreamID(b, db, "wc", "kafka:words/0")
		for lo := 0; lo < keys; lo += 10_000 {
			cp := &Checkpoint{Task: "wc"}
			for i := lo; i < lo+10_000; i++ {
				cp.Keys = append(cp.Keys, KeyWrites{Stream: a, Key: fmt.Appendf(nil, "key%06d", i), Mark: int64(i),
					Writes: []Write{{Name: []byte("n"), Value: []byte("12345678")}},
					Timers: []TimerOp{{Name: []byte("t"), Due: int64(i)}}})
			}
			mustCommit(b, db, cp)
		}
		to := mustStreamID(b, db, "wc.reset-1", "kafka:words/0")
		b.StartTimer()
		m, err := db.MoveStream("wc", a, "wc.reset-1", to)
		if err != nil || m.Keys != keys {
			b.Fatalf("moved %+v: %v", m, err)
		}
	}
	b.ReportMetric(float64(keys)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}
