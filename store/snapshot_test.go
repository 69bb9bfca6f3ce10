package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// snapString describes a snapshot for comparisons (nil and empty slices
// alike; timers in name order).
func snapString(s KeySnapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "key=%q", s.Key)
	if s.HasMark {
		fmt.Fprintf(&b, " mark=%d v%d", s.Mark, s.StateVersion)
	} else {
		fmt.Fprintf(&b, " nomark(%d,v%d)", s.Mark, s.StateVersion)
	}
	for _, w := range s.Names {
		fmt.Fprintf(&b, " %q=%q", w.Name, w.Value)
		if w.Delete {
			b.WriteString("(delete)")
		}
	}
	ts := slices.Clone(s.Timers)
	slices.SortFunc(ts, func(a, b Timer) int { return bytes.Compare(a.Name, b.Name) })
	for _, t := range ts {
		if !bytes.Equal(t.Key, s.Key) {
			fmt.Fprintf(&b, " timer-of-%q", t.Key)
		}
		fmt.Fprintf(&b, " timer %q@%d:%d=%q", t.Name, t.Domain, t.Due, t.Payload)
	}
	return b.String()
}

// mustSnapshot returns the snapshot of key in stream s of task "t".
func mustSnapshot(t testing.TB, db *DB, s uint32, key string) KeySnapshot {
	t.Helper()
	snap, err := db.Snapshot("t", s, []byte(key))
	if err != nil {
		t.Fatalf("Snapshot(%d, %q): %v", s, key, err)
	}
	return snap
}

// timer builds a Timer of a snapshot.
func timer(key, name string, domain uint8, due int64, payload string) Timer {
	return Timer{Key: []byte(key), Name: []byte(name), Domain: domain, Due: due, Payload: []byte(payload)}
}

func TestSnapshot(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	s2 := mustStreamID(t, db, "t", "s2")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("k"), Mark: 7, StateVersion: 3,
			Writes: []Write{set("b", "2"), set("a", "1"), set("", ""), set("gone", "x"), del("gone")},
			Timers: []TimerOp{setTimer("t2", 1, -3, ""), setTimer("t1", 0, 5, "p"), setTimer("t3", 0, 1, "x"), delTimer("t3")}},
		// Neighbours that a prefix scan must not mix in.
		{Stream: s, Key: []byte("kk"), Mark: 1, Writes: []Write{set("a", "kk")}, Timers: []TimerOp{setTimer("t1", 0, 1, "")}},
		{Stream: s, Key: []byte(""), Mark: 2, Writes: []Write{set("k", "empty key")}},
		{Stream: s2, Key: []byte("k"), Mark: 3, Writes: []Write{set("a", "other stream")}},
		{Stream: s, Key: []byte("none"), Mark: NoneApplied, StateVersion: 9, Writes: []Write{set("n", "v")}},
	}})
	for _, tc := range []struct {
		name, key string
		want      KeySnapshot
	}{
		{"full", "k", KeySnapshot{Key: []byte("k"), Mark: 7, HasMark: true, StateVersion: 3,
			Names:  []Write{set("", ""), set("a", "1"), set("b", "2")},
			Timers: []Timer{timer("k", "t1", 0, 5, "p"), timer("k", "t2", 1, -3, "")}}},
		{"empty key", "", KeySnapshot{Key: []byte{}, Mark: 2, HasMark: true, Names: []Write{set("k", "empty key")}}},
		{"none applied", "none", KeySnapshot{Key: []byte("none"), Mark: NoneApplied, HasMark: true, StateVersion: 9,
			Names: []Write{set("n", "v")}}},
		{"missing", "nope", KeySnapshot{Key: []byte("nope"), Mark: NoneApplied}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustSnapshot(t, db, s, tc.key)
			if snapString(got) != snapString(tc.want) {
				t.Errorf("Snapshot =\n %s\nwant\n %s", snapString(got), snapString(tc.want))
			}
			if got.Key == nil {
				t.Error("Key is nil")
			}
			for _, w := range got.Names {
				if w.Value == nil {
					t.Errorf("name %q: nil value", w.Name)
				}
			}
			for i, tm := range got.Timers {
				if tm.Payload == nil {
					t.Errorf("timer %q: nil payload", tm.Name)
				}
				if i > 0 && bytes.Compare(got.Timers[i-1].Name, tm.Name) >= 0 {
					t.Errorf("timers not in name order: %q after %q", tm.Name, got.Timers[i-1].Name)
				}
			}
		})
	}
	if _, err := db.Snapshot("", s, nil); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Snapshot with empty task: %v, want ErrInvalidName", err)
	}
}

// testSnapshots are snapshots for encoding tests.
func testSnapshots() []KeySnapshot {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	return []KeySnapshot{
		{Key: []byte{}, Mark: NoneApplied},
		{Key: []byte("k"), Mark: NoneApplied, HasMark: true},
		{Key: []byte("k"), Mark: 0, HasMark: true, StateVersion: math.MaxUint32},
		{Key: []byte("k"), Mark: math.MaxInt64, HasMark: true, StateVersion: 1,
			Names:  []Write{set("", ""), set("a", ""), set("b", "v")},
			Timers: []Timer{timer("k", "z", 1, math.MinInt64, ""), timer("k", "", 0, -1, "p"), timer("k", "m", 0, math.MaxInt64, "q")}},
		{Key: big[:70000], Mark: 1 << 40, HasMark: true,
			Names:  []Write{{Name: big[:300], Value: []byte{0}}, {Name: []byte("big"), Value: big}},
			Timers: []Timer{{Key: big[:70000], Name: []byte("t"), Due: -5, Payload: big}}},
	}
}

func TestSnapshotEncodeRoundTrip(t *testing.T) {
	for i, s := range testSnapshots() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			enc := EncodeSnapshot([]byte("prefix"), &s)
			if !bytes.HasPrefix(enc, []byte("prefix")) || enc[len("prefix")] != SnapshotFormatVersion {
				t.Fatalf("EncodeSnapshot did not append after dst with the version byte: % x", enc[:min(len(enc), 16)])
			}
			b := slices.Clone(enc[len("prefix"):])
			got, err := DecodeSnapshot(b)
			if err != nil {
				t.Fatalf("DecodeSnapshot: %v", err)
			}
			if snapString(got) != snapString(s) {
				t.Fatalf("round trip:\n got %.300s\nwant %.300s", snapString(got), snapString(s))
			}
			// The result is a copy: reusing b does not change it.
			want := snapString(got)
			clear(b)
			if snapString(got) != want {
				t.Error("decoded snapshot aliases its input")
			}
			if got.Key == nil {
				t.Error("nil Key")
			}
			for _, w := range got.Names {
				if w.Value == nil || w.Name == nil {
					t.Errorf("nil name or value in %q", w.Name)
				}
			}
			for _, tm := range got.Timers {
				if tm.Payload == nil {
					t.Errorf("nil payload in timer %q", tm.Name)
				}
			}
		})
	}
	// Golden: the layout documented on EncodeSnapshot.
	s := KeySnapshot{Key: []byte("k"), Mark: -1, HasMark: true, StateVersion: 2,
		Names: []Write{set("n", "v")}, Timers: []Timer{timer("k", "t", 1, -2, "p")}}
	want := []byte{1, 1, 0x01, 0x02, 1, 'k', 1, 1, 'n', 1, 'v', 1, 1, 't', 1, 0x03, 1, 'p'}
	if got := EncodeSnapshot(nil, &s); !bytes.Equal(got, want) {
		t.Errorf("EncodeSnapshot = % x, want % x", got, want)
	}
	if got := EncodeSnapshot(nil, &KeySnapshot{Key: []byte("k"), Mark: 5}); !bytes.Equal(got, []byte{1, 0, 1, 'k', 0, 0}) {
		t.Errorf("EncodeSnapshot without mark = % x", got)
	}
	// The size the package documentation quotes.
	typical := KeySnapshot{Key: []byte("0123456789abcdef"), Mark: 63, HasMark: true, Names: []Write{set("count", "12345678")}}
	if n := len(EncodeSnapshot(nil, &typical)); n != 38 {
		t.Errorf("typical snapshot takes %d bytes, the package doc says 38", n)
	}
}

func TestDecodeSnapshotRejects(t *testing.T) {
	valid := EncodeSnapshot(nil, &testSnapshots()[3])
	for n := range len(valid) {
		if _, err := DecodeSnapshot(valid[:n]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d of %d bytes: %v, want ErrCorrupt", n, len(valid), err)
		}
	}
	enc := func(s KeySnapshot) []byte { return EncodeSnapshot(nil, &s) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version 0", append([]byte{0}, valid[1:]...)},
		{"version 2", append([]byte{2}, valid[1:]...)},
		{"unknown flag", []byte{1, 2, 0, 0, 0}},
		{"trailing byte", append(slices.Clone(valid), 0)},
		{"mark below -1", enc(KeySnapshot{Mark: -2, HasMark: true})},
		{"mark DropMark", enc(KeySnapshot{Mark: DropMark, HasMark: true})},
		{"state version over u32", []byte{1, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0}},
		{"varint overflow", []byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"key length beyond input", []byte{1, 0, 5, 'a', 0, 0}},
		{"huge name count", []byte{1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}},
		{"huge timer count", []byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"names out of order", enc(KeySnapshot{Names: []Write{set("b", ""), set("a", "")}})},
		{"name twice", enc(KeySnapshot{Names: []Write{set("a", ""), set("a", "")}})},
		{"timer domain 2", enc(KeySnapshot{Timers: []Timer{timer("", "t", 2, 0, "")}})},
		{"timer name twice", enc(KeySnapshot{Timers: []Timer{timer("", "b", 0, 0, ""), timer("", "a", 0, 0, ""), timer("", "b", 1, 1, "")}})},
		{"garbage", []byte("\x01\x00garbage that is not a snapshot")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := DecodeSnapshot(tc.b); !errors.Is(err, ErrCorrupt) {
				t.Errorf("DecodeSnapshot(% x) = %s, %v; want ErrCorrupt", tc.b, snapString(s), err)
			}
		})
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	for _, s := range testSnapshots()[:4] {
		f.Add(EncodeSnapshot(nil, &s))
	}
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{1, 1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnapshot(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, err := DecodeSnapshot(EncodeSnapshot(nil, &s))
		if err != nil {
			t.Fatalf("re-decoding a decoded snapshot: %v", err)
		}
		if snapString(again) != snapString(s) {
			t.Fatalf("re-encoding changed the snapshot:\n%s\n%s", snapString(s), snapString(again))
		}
	})
}

// TestSnapshotApply checks KeySnapshot.Apply against the store itself: over rounds of random
// writes, timer operations and marks, the snapshot taken before a commit with the commit's
// change applied equals the snapshot taken after it.
func TestSnapshotApply(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"", "a", "b"}
	names := []string{"", "x", "y", "z"}
	for round := range 300 {
		var cp Checkpoint
		cp.Task = "t"
		for _, k := range keys {
			if rng.IntN(3) == 0 {
				continue
			}
			kw := KeyWrites{Stream: s, Key: []byte(k), Mark: int64(round), StateVersion: uint32(rng.IntN(3))}
			if rng.IntN(10) == 0 {
				kw.Mark = DropMark
			}
			for range rng.IntN(5) {
				n := names[rng.IntN(len(names))]
				if rng.IntN(3) == 0 {
					kw.Writes = append(kw.Writes, del(n))
				} else {
					kw.Writes = append(kw.Writes, set(n, fmt.Sprint(round, rng.IntN(100))))
				}
			}
			for range rng.IntN(3) {
				n := names[rng.IntN(len(names))]
				if rng.IntN(3) == 0 {
					kw.Timers = append(kw.Timers, delTimer(n))
				} else {
					kw.Timers = append(kw.Timers, setTimer(n, uint8(rng.IntN(2)), rng.Int64N(1000)-500, fmt.Sprint(rng.IntN(3))))
				}
			}
			cp.Keys = append(cp.Keys, kw)
		}
		want := map[string]string{}
		for i := range cp.Keys {
			snap := mustSnapshot(t, db, s, string(cp.Keys[i].Key))
			snap.Apply(&cp.Keys[i])
			want[string(cp.Keys[i].Key)] = snapString(snap)
		}
		mustCommit(t, db, &cp)
		for k, w := range want {
			if got := snapString(mustSnapshot(t, db, s, k)); got != w {
				t.Fatalf("round %d key %q: applied %s\ncommitted %s", round, k, w, got)
			}
		}
	}
}

// TestSnapshotsMatchSnapshot checks that Snapshots, one transaction for many keys with buffers
// reused from key to key, gives each key the snapshot Snapshot gives it: keys with names, timers,
// marks, none of them, neighbours that share a prefix, keys of a stream without timers, asked for
// in any order and more than once.
func TestSnapshotsMatchSnapshot(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	s2 := mustStreamID(t, db, "t", "s2") // no timers at all
	other := mustStreamID(t, db, "u", "s")
	cp := &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("k"), Mark: 7, StateVersion: 3,
			Writes: []Write{set("b", "2"), set("a", "1"), set("", ""), set("gone", "x"), del("gone")},
			Timers: []TimerOp{setTimer("t2", 1, -3, ""), setTimer("t1", 0, 5, "p"), setTimer("t3", 0, 1, "x"), delTimer("t3")}},
		{Stream: s, Key: []byte("kk"), Mark: 1, Writes: []Write{set("a", "kk")}, Timers: []TimerOp{setTimer("t1", 0, 1, "")}},
		{Stream: s, Key: []byte(""), Mark: 2, Writes: []Write{set("k", "empty key")}},
		{Stream: s2, Key: []byte("k"), Mark: 3, Writes: []Write{set("a", "other stream")}},
		{Stream: s, Key: []byte("none"), Mark: NoneApplied, StateVersion: 9, Writes: []Write{set("n", "v")}},
		{Stream: s, Key: []byte("timers only"), Mark: 4, Timers: []TimerOp{setTimer("x", 0, 9, "pay")}},
		{Stream: s, Key: []byte("mark dropped"), Mark: DropMark, Writes: []Write{set("a", "1")}}, // index 6: carried
	}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		kw := KeyWrites{Stream: []uint32{s, s2}[i%2], Key: []byte(fmt.Sprintf("r%03d", i)), Mark: int64(i)}
		for j := 0; j < rng.IntN(4); j++ {
			kw.Writes = append(kw.Writes, set(fmt.Sprintf("n%d", j), strings.Repeat("v", rng.IntN(40))))
		}
		if kw.Stream == s && rng.IntN(3) == 0 {
			kw.Timers = append(kw.Timers, setTimer("tm", 0, int64(i), "p"))
		}
		cp.Keys = append(cp.Keys, kw)
	}
	mustCommit(t, db, cp)
	mustCommit(t, db, &Checkpoint{Task: "u", Keys: []KeyWrites{{Stream: other, Key: []byte("k"), Mark: 5, Writes: []Write{set("a", "task u")}}}})

	// Every other key carries its change in cp (the mark is taken from it), the rest are read.
	var refs []KeyRef
	for i := range cp.Keys {
		kw := &cp.Keys[i]
		r := KeyRef{Stream: kw.Stream, Key: kw.Key}
		if i%2 == 0 {
			r.Written = kw
		}
		refs = append(refs, r)
	}
	refs = append(refs, KeyRef{Stream: s, Key: []byte("nope")}, KeyRef{Stream: s2, Key: []byte("kk")}, KeyRef{Stream: s, Key: []byte("k")},
		KeyRef{Stream: s, Key: []byte("k"), Written: &cp.Keys[0]})
	rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })

	got := make([]string, len(refs))
	encoded := make([][]byte, len(refs))
	calls := 0
	err := db.Snapshots("t", refs, func(i int, snap *KeySnapshot) error {
		calls++
		if got[i] != "" {
			t.Fatalf("fn called twice with index %d", i)
		}
		for _, w := range snap.Names {
			if w.Value == nil {
				t.Errorf("key %q name %q: nil value", snap.Key, w.Name)
			}
		}
		for _, tm := range snap.Timers {
			if tm.Payload == nil {
				t.Errorf("key %q timer %q: nil payload", snap.Key, tm.Name)
			}
		}
		got[i] = snapString(*snap)
		encoded[i] = EncodeSnapshot(nil, snap)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != len(refs) {
		t.Fatalf("fn called %d times for %d keys", calls, len(refs))
	}
	withTimers := 0
	for i, r := range refs {
		want := mustSnapshot(t, db, r.Stream, string(r.Key))
		withTimers += len(want.Timers)
		if got[i] != snapString(want) {
			t.Errorf("key %d (stream %d, %q): Snapshots gave\n %s\nSnapshot gives\n %s", i, r.Stream, r.Key, got[i], snapString(want))
		}
		if !bytes.Equal(encoded[i], EncodeSnapshot(nil, &want)) {
			t.Errorf("key %d (stream %d, %q): encodings differ", i, r.Stream, r.Key)
		}
	}
	if withTimers < 10 {
		t.Fatalf("only %d timers among the keys: the test covers too little", withTimers)
	}

	stop := errors.New("stop")
	calls = 0
	if err := db.Snapshots("t", refs, func(int, *KeySnapshot) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn's error: Snapshots returned %v after %d calls, want stop after 1", err, calls)
	}
	if err := db.Snapshots("", refs, func(int, *KeySnapshot) error { return nil }); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Snapshots with empty task: %v, want ErrInvalidName", err)
	}
}

// TestSnapshotsWhole: a key whose KeyRef carries a Written with Whole set gets no names from the
// store (none of its state entries is read: the caller's Writes are the whole state), with its
// timers and mark as for any key; applying Written then gives the snapshot Snapshot gives.
func TestSnapshotsWhole(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	cp := &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 3, Writes: []Write{set("n", "1")}, Timers: []TimerOp{setTimer("t", 0, 5, "p")}},
		{Stream: s, Key: []byte("b"), Mark: 4, Writes: []Write{set("n", "2"), set("m", "x")}},
		{Stream: s, Key: []byte("c"), Mark: 5, Writes: []Write{set("n", "3")}},
	}}
	mustCommit(t, db, cp)
	next := &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 6, Writes: []Write{set("n", "4")}, Whole: true},
		{Stream: s, Key: []byte("b"), Mark: 7, Writes: []Write{set("n", "5")}, Whole: true}, // m is not in it: a caller's mistake shows
		{Stream: s, Key: []byte("c"), Mark: 8, Writes: []Write{set("n", "6")}},
	}}
	mustCommit(t, db, next)
	var refs []KeyRef
	for i := range next.Keys {
		refs = append(refs, KeyRef{Stream: s, Key: next.Keys[i].Key, Written: &next.Keys[i]})
	}
	got := map[string]string{}
	if err := db.Snapshots("t", refs, func(i int, snap *KeySnapshot) error {
		if w := refs[i].Written; w.Whole && len(snap.Names) != 0 {
			t.Errorf("key %q: Whole, yet %d names read", snap.Key, len(snap.Names))
		}
		snap.Apply(refs[i].Written)
		got[string(snap.Key)] = snapString(*snap)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "c"} {
		if want := mustSnapshot(t, db, s, k); got[k] != snapString(want) {
			t.Errorf("key %q: Snapshots and Apply gave\n %s\nSnapshot gives\n %s", k, got[k], snapString(want))
		}
	}
	if want := mustSnapshot(t, db, s, "b"); got["b"] == snapString(want) || strings.Contains(got["b"], `"m"=`) {
		t.Errorf("key b: Whole, yet the stored name m was read: %s", got["b"])
	}
}

// TestStreamKeys: StreamKeys returns every key of a stream that holds a state entry, a timer or
// a mark, whatever it holds (one of each kind alone, and one with all three), each once, in
// bytewise order, and nothing of another stream.
func TestStreamKeys(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true})
	id, other := mustStreamID(t, db, "t", "s"), mustStreamID(t, db, "t", "other")
	snaps := []KeySnapshot{
		{Key: []byte("names"), Names: []Write{{Name: []byte("n"), Value: []byte("1")}, {Name: []byte("o"), Value: []byte("2")}}, Mark: NoneApplied},
		{Key: []byte("timer"), Timers: []Timer{{Name: []byte("a"), Due: 5}, {Name: []byte("b"), Due: 6}}, Mark: NoneApplied},
		{Key: []byte("mark"), Mark: 7, HasMark: true},
		{Key: []byte("all"), Names: []Write{{Name: []byte("n"), Value: []byte("1")}}, Timers: []Timer{{Name: []byte("a"), Due: 5}}, Mark: 3, HasMark: true},
		{Key: []byte{}, Names: []Write{{Name: []byte("n"), Value: []byte("1")}}, Mark: NoneApplied},
	}
	if err := db.Restore("t", id, snaps, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.Restore("t", other, []KeySnapshot{{Key: []byte("elsewhere"), Mark: 1, HasMark: true}}, nil); err != nil {
		t.Fatal(err)
	}
	keys, err := db.StreamKeys("t", id)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprintf("%q", keys), `["" "all" "mark" "names" "timer"]`; got != want {
		t.Errorf("StreamKeys = %s, want %s", got, want)
	}
}
