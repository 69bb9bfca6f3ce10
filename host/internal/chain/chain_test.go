package chain

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/store"
)

func openStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// appendEntries commits n entries with values "v<offset>" as the upstream's checkpoint would.
func appendEntries(t *testing.T, l *Log, n int) {
	t.Helper()
	cp := store.Checkpoint{Task: l.Task()}
	h := l.Head()
	for i := range uint64(n) {
		v := Encode(nil, Entry{Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", h+i), Timestamp: int64(h + i)})
		cp.Chain = append(cp.Chain, store.ChainEntry{Output: l.Output(), Offset: h + i, Value: v})
	}
	if err := l.db.Commit(&cp); err != nil {
		t.Fatal(err)
	}
	l.Committed(h + uint64(n))
}

func TestCodecRoundTrip(t *testing.T) {
	e := Entry{Key: []byte("key"), Value: []byte("value"), Timestamp: -1, Headers: []abi.Header{{Name: []byte("h"), Value: []byte("1")}}}
	b := Encode(nil, e)
	if len(b) != EncodedLen(e) {
		t.Fatalf("EncodedLen %d, encoded %d", EncodedLen(e), len(b))
	}
	got, err := Decode(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(e) {
		t.Fatalf("Decode = %v, %v; want %v", got, err, e)
	}
	for i := range len(b) {
		if _, err := Decode(b[:i]); !errors.Is(err, ErrBadEntry) {
			t.Fatalf("Decode of %d of %d bytes = %v, want ErrBadEntry", i, len(b), err)
		}
	}
}

// TestCodecValueNull: an entry with a null value (a tombstone, ABI 0.5) decodes as null, an
// entry with an empty value as empty, and both are as long as EncodedLen says.
func TestCodecValueNull(t *testing.T) {
	for _, e := range []Entry{
		{Key: []byte("k"), Value: []byte{}, ValueNull: true, Timestamp: 7, Headers: []abi.Header{{Name: []byte("h"), Value: []byte("1")}}},
		{Key: []byte("k"), Value: []byte{}, Timestamp: 7},
	} {
		b := Encode(nil, e)
		if len(b) != EncodedLen(e) {
			t.Fatalf("EncodedLen %d, encoded %d", EncodedLen(e), len(b))
		}
		got, err := Decode(b)
		if err != nil || got.ValueNull != e.ValueNull || len(got.Value) != 0 || got.Value == nil || len(got.Headers) != len(e.Headers) {
			t.Fatalf("Decode = %+v, %v; want ValueNull %v and an empty value", got, err, e.ValueNull)
		}
		for i := range len(b) {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrBadEntry) {
				t.Fatalf("Decode of %d of %d bytes = %v, want ErrBadEntry", i, len(b), err)
			}
		}
	}
}

// TestReaderBacklogTrim: a reader reads the committed entries from its start, ends once the
// upstream ended and it reached the head; the backlog blocks the upstream at the bound until a
// covered position lowers it, which wakes the upstream and trims the log.
func TestReaderBacklogTrim(t *testing.T) {
	defer func(b uint64) { trimBatch = b }(trimBatch)
	trimBatch = 1
	db := openStore(t)
	l, err := Open(db, "up", "counts")
	if err != nil {
		t.Fatal(err)
	}
	r := l.AddReader("down", "in", 5)
	woken := 0
	l.SetUpstream(func() { woken++ })
	appendEntries(t, l, 3)
	if l.Blocked() {
		t.Fatal("blocked with 3 of 5")
	}
	appendEntries(t, l, 2)
	if !l.Blocked() {
		t.Fatal("not blocked with 5 of 5")
	}
	r.Start(7, 0)
	out := make(chan source.Chunk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx, out)
	var got []string
	for len(got) < 5 {
		c := <-out
		if c.Err != nil || c.Done || c.Stream != 7 {
			t.Fatalf("chunk %+v", c)
		}
		for _, rec := range c.Records {
			got = append(got, fmt.Sprintf("%d:%s", rec.Offset, rec.Value))
		}
	}
	if fmt.Sprint(got) != "[0:v0 1:v1 2:v2 3:v3 4:v4]" {
		t.Fatalf("read %v", got)
	}
	if err := r.Covered(3); err != nil {
		t.Fatal(err)
	}
	if l.Blocked() || woken != 1 {
		t.Fatalf("after covering 3: blocked %v, upstream woken %d times; want false, 1", l.Blocked(), woken)
	}
	var left []uint64
	db.ChainRead("up", "counts", 0, 0, func(off uint64, _ []byte) bool { left = append(left, off); return true })
	if fmt.Sprint(left) != "[3 4]" {
		t.Fatalf("after trimming below 3 the log holds %v", left)
	}
	appendEntries(t, l, 1)
	l.End()
	c := <-out
	if len(c.Records) != 1 || c.Records[0].Offset != 5 {
		t.Fatalf("chunk after the end %+v", c)
	}
	if c = <-out; !c.Done {
		t.Fatalf("chunk %+v, want Done", c)
	}
	// A new run numbers after the last entry, trimmed or not.
	l2, err := Open(db, "up", "counts")
	if err != nil || l2.Head() != 6 {
		t.Fatalf("reopened head %d, %v; want 6", l2.Head(), err)
	}
}
