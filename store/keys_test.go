package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func TestStateKeyGolden(t *testing.T) {
	// The example of the package documentation.
	got := appendStateKey(nil, "wc", 1, []byte("ab"), []byte("n"))
	want, _ := hex.DecodeString("73" + "0002" + "7763" + "00000001" + "00000002" + "6162" + "6e")
	if !bytes.Equal(got, want) {
		t.Fatalf("state key = %x, want %x", got, want)
	}
	gotPos := appendPositionKey(nil, "wc", 1)
	wantPos, _ := hex.DecodeString("70" + "0002" + "7763" + "00000001")
	if !bytes.Equal(gotPos, wantPos) {
		t.Fatalf("position key = %x, want %x", gotPos, wantPos)
	}
	id := [16]byte{0: 0xab, 15: 0xcd}
	gotVal := appendPosition(nil, Position{Next: 1, Horizon: -1, Resume: 258, Watermark: 1000, TopicID: id})
	wantVal, _ := hex.DecodeString("0000000000000001" + "ffffffffffffffff" + "0000000000000102" + "00000000000003e8" +
		"ab0000000000000000000000000000cd")
	if !bytes.Equal(gotVal, wantVal) {
		t.Fatalf("position value = %x, want %x", gotVal, wantVal)
	}
	if p, err := decodePosition(wantVal); err != nil || p.TopicID != id || p.Watermark != 1000 {
		t.Fatalf("position = %+v, %v", p, err)
	}
	// With a changelog epoch, 8 bytes more; without one (0) the value stays 48 bytes, which
	// hosts older than the epoch read.
	withEpoch := appendPosition(nil, Position{Next: 1, Horizon: -1, Resume: 258, Watermark: 1000, TopicID: id, Epoch: 0x0000000300000007})
	if want := append(append([]byte(nil), wantVal...), 0, 0, 0, 3, 0, 0, 0, 7); !bytes.Equal(withEpoch, want) {
		t.Fatalf("position value with an epoch = %x, want %x", withEpoch, want)
	}
	if p, err := decodePosition(withEpoch); err != nil || p.Epoch != 0x0000000300000007 || p.TopicID != id || p.Resume != 258 {
		t.Fatalf("position with an epoch = %+v, %v", p, err)
	}
	// With a leader epoch (format 5), the changelog epoch (even 0) and 4 bytes more: the epoch
	// plus one. Without one (the zero value) the value stays as format 4 wrote it.
	withLeader := appendPosition(nil, Position{Next: 1, Horizon: -1, Resume: 258, Watermark: 1000, TopicID: id, LeaderEpoch: KnownLeaderEpoch(2)})
	if want := append(append([]byte(nil), wantVal...), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3); !bytes.Equal(withLeader, want) {
		t.Fatalf("position value with a leader epoch = %x, want %x", withLeader, want)
	}
	if p, err := decodePosition(withLeader); err != nil || p.LeaderEpoch.Epoch() != 2 || p.Epoch != 0 || p.TopicID != id {
		t.Fatalf("position with a leader epoch = %+v, %v", p, err)
	}
	if p, err := decodePosition(withEpoch); err != nil || p.LeaderEpoch != 0 || p.LeaderEpoch.Epoch() != -1 {
		t.Fatalf("a format-4 position's leader epoch = %+v, %v; want unknown (-1)", p, err)
	}
	if KnownLeaderEpoch(-1) != 0 || KnownLeaderEpoch(0).Epoch() != 0 {
		t.Fatalf("KnownLeaderEpoch(-1) = %d, KnownLeaderEpoch(0).Epoch() = %d; want 0 and 0", KnownLeaderEpoch(-1), KnownLeaderEpoch(0).Epoch())
	}
	// A position written before the topic id (32 bytes) reads with a zero id.
	if p, err := decodePosition(wantVal[:32]); err != nil || p != (Position{Next: 1, Horizon: -1, Resume: 258, Watermark: 1000}) {
		t.Fatalf("position without a topic id = %+v, %v", p, err)
	}
	// A format-1 position (24 bytes, no watermark) reads with watermark -1.
	p, err := decodePosition(wantVal[:24])
	if err != nil || p != (Position{Next: 1, Horizon: -1, Resume: 258, Watermark: -1}) {
		t.Fatalf("format-1 position = %+v, %v", p, err)
	}
}

func TestStateKeyRoundTrip(t *testing.T) {
	tests := []struct {
		desc      string
		task      string
		stream    uint32
		key, name []byte
	}{
		{desc: "plain", task: "wordcount", stream: 1, key: []byte("apple"), name: []byte("count")},
		{desc: "empty key and name", task: "t", stream: 2, key: []byte{}, name: []byte{}},
		{desc: "nil key and name", task: "t", stream: 3},
		{desc: "empty key", task: "t", stream: 4, key: nil, name: []byte("n")},
		{desc: "empty name", task: "t", stream: 5, key: []byte("k"), name: nil},
		{desc: "binary", task: "t\x00\xff", stream: 0xffffffff, key: []byte{0, 0, 0, 1}, name: []byte{0xff, 0}},
		{desc: "long task", task: strings.Repeat("x", MaxTaskLen), stream: 7, key: []byte("k"), name: []byte("n")},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			k := appendStateKey(nil, tt.task, tt.stream, tt.key, tt.name)
			if len(k) != stateKeyLen(tt.task, tt.key, tt.name) {
				t.Errorf("len = %d, stateKeyLen = %d", len(k), stateKeyLen(tt.task, tt.key, tt.name))
			}
			task, stream, key, name, err := decodeStateKey(k)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if task != tt.task || stream != tt.stream || !bytes.Equal(key, tt.key) || !bytes.Equal(name, tt.name) {
				t.Errorf("decode = (%q, %d, %q, %q), want (%q, %d, %q, %q)",
					task, stream, key, name, tt.task, tt.stream, tt.key, tt.name)
			}
		})
	}
}

// TestKeyPrefixExact checks that the prefix of one (task, stream, key) never
// matches an entry of another: a prefix scan must be exact.
func TestKeyPrefixExact(t *testing.T) {
	type ident struct {
		task   string
		stream uint32
		key    string
	}
	tests := []struct {
		name string
		a, b ident // a's prefix must not be a prefix of any key of b, and vice versa
	}{
		{name: "key a vs ab", a: ident{"t", 1, "a"}, b: ident{"t", 1, "ab"}},
		{name: "empty key vs a", a: ident{"t", 1, ""}, b: ident{"t", 1, "a"}},
		{name: "task a vs ab", a: ident{"a", 1, "k"}, b: ident{"ab", 1, "k"}},
		{name: "task+stream shift", a: ident{"a", 0x62000000, "k"}, b: ident{"ab", 0, "k"}},
		{name: "stream 1 vs 256", a: ident{"t", 1, "k"}, b: ident{"t", 256, "k"}},
		{name: "key bytes look like length", a: ident{"t", 1, "\x00"}, b: ident{"t", 1, "\x00\x00"}},
	}
	names := [][]byte{nil, []byte("b"), []byte("\x00"), []byte("x\xff")}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, pair := range [][2]ident{{tt.a, tt.b}, {tt.b, tt.a}} {
				p, o := pair[0], pair[1]
				prefix := appendStateKeyPrefix(nil, p.task, p.stream, []byte(p.key))
				for _, n := range names {
					full := appendStateKey(nil, o.task, o.stream, []byte(o.key), n)
					if bytes.HasPrefix(full, prefix) {
						t.Errorf("state key of %+v name %q has the prefix of %+v", o, n, p)
					}
				}
				mp := appendStreamPrefix(nil, tableMark, p.task, p.stream)
				if p.stream != o.stream || p.task != o.task {
					if bytes.HasPrefix(appendMarkKey(nil, o.task, o.stream, []byte(o.key)), mp) {
						t.Errorf("mark key of %+v has the stream prefix of %+v", o, p)
					}
				}
			}
		})
	}
}

func TestDecodeStateKeyRejects(t *testing.T) {
	tests := []struct {
		name string
		k    []byte
	}{
		{name: "empty", k: nil},
		{name: "wrong table", k: appendMarkKey(nil, "t", 1, []byte("k"))},
		{name: "task length too long", k: []byte{'s', 0, 9, 't'}},
		{name: "no stream", k: []byte{'s', 0, 1, 't', 0, 0}},
		{name: "no key length", k: []byte{'s', 0, 1, 't', 0, 0, 0, 1, 0}},
		{name: "key length too long", k: []byte{'s', 0, 1, 't', 0, 0, 0, 1, 0, 0, 0, 2, 'k'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, _, _, err := decodeStateKey(tt.k); !errors.Is(err, ErrCorrupt) {
				t.Errorf("decodeStateKey(%x) error = %v, want ErrCorrupt", tt.k, err)
			}
		})
	}
}

func TestPrefixEnd(t *testing.T) {
	tests := []struct {
		in, want []byte
	}{
		{in: []byte{1, 2}, want: []byte{1, 3}},
		{in: []byte{1, 0xff}, want: []byte{2}},
		{in: []byte{0xff, 0xff}, want: nil},
		{in: []byte{}, want: nil},
	}
	for _, tt := range tests {
		if got := prefixEnd(tt.in); !bytes.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("prefixEnd(%x) = %x, want %x", tt.in, got, tt.want)
		}
	}
}

func FuzzStateKey(f *testing.F) {
	f.Add("wordcount", uint32(1), []byte("apple"), []byte("count"), []byte(nil))
	f.Add("t", uint32(0), []byte{}, []byte{}, []byte{'s', 0, 1, 't', 0, 0, 0, 1, 0, 0, 0, 0})
	f.Add("a\x00b", uint32(0xffffffff), []byte{0, 0, 0, 1}, []byte{0xff}, []byte{'s', 0xff, 0xff})
	f.Add("x", uint32(256), []byte("ab"), []byte(""), []byte{'s', 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, task string, stream uint32, key, name, raw []byte) {
		if len(task) <= MaxTaskLen {
			k := appendStateKey(nil, task, stream, key, name)
			gt, gs, gk, gn, err := decodeStateKey(k)
			if err != nil {
				t.Fatalf("decode(encode(%q, %d, %q, %q)): %v", task, stream, key, name, err)
			}
			if gt != task || gs != stream || !bytes.Equal(gk, key) || !bytes.Equal(gn, name) {
				t.Fatalf("round trip of (%q, %d, %q, %q) = (%q, %d, %q, %q)", task, stream, key, name, gt, gs, gk, gn)
			}
			prefix := appendStateKeyPrefix(nil, task, stream, key)
			if !bytes.HasPrefix(k, prefix) || len(k)-len(prefix) != len(name) {
				t.Fatalf("state key %x does not extend its prefix %x by the name", k, prefix)
			}
		}
		// Decoding arbitrary bytes never panics, and what decodes re-encodes
		// to the same bytes (the encoding is canonical).
		gt, gs, gk, gn, err := decodeStateKey(raw)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode(%x) error %v does not wrap ErrCorrupt", raw, err)
			}
			return
		}
		if re := appendStateKey(nil, gt, gs, gk, gn); !bytes.Equal(re, raw) {
			t.Fatalf("decode(%x) re-encodes as %x", raw, re)
		}
	})
}

// TestLeaderEpochFormat: a store of format 4 (positions without a leader epoch) opens and
// upgrades to format 5, its positions reading with an unknown leader epoch (they resume as
// before, without the broker's check); a position committed with one reads it back after a
// reopen; and a binary of format 4 refuses the upgraded store (ErrFormatTooNew, as
// TestFormatVersion checks for FormatVersion+1) rather than fail on a 60-byte position value.
func TestLeaderEpochFormat(t *testing.T) {
	if FormatVersion < 5 {
		t.Fatalf("FormatVersion = %d, want at least 5: a binary without leader epochs must refuse a store whose positions have them", FormatVersion)
	}
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "t", "kafka:words/0")
	id := [16]byte{0: 1}
	mustCommit(t, db, &Checkpoint{Task: "t", Positions: []StreamPosition{{Stream: s, Position: Position{Next: 1000, Horizon: 999, Watermark: -1, TopicID: id, Epoch: 5}}}})
	mustClose(t, db)
	rawBadger(t, dir, func(txn *badger.Txn) error {
		return txn.Set(versionKey, binary.BigEndian.AppendUint32(nil, 4))
	})
	db = openTestDBAt(t, dir, Options{})
	if got := storedFormat(t, db); got != FormatVersion {
		t.Errorf("stored format after opening a format-4 store = %d, want %d", got, FormatVersion)
	}
	p, ok, err := db.Position("t", s)
	if err != nil || !ok || p.Next != 1000 || p.Epoch != 5 || p.TopicID != id || p.LeaderEpoch.Epoch() != -1 {
		t.Fatalf("a format-4 position = %+v, %v, %v; want Next 1000, its epoch and id, leader epoch unknown (-1)", p, ok, err)
	}
	p.Next, p.Horizon, p.LeaderEpoch = 1200, 1199, KnownLeaderEpoch(3)
	mustCommit(t, db, &Checkpoint{Task: "t", Positions: []StreamPosition{{Stream: s, Position: p}}})
	mustClose(t, db)
	db = openTestDBAt(t, dir, Options{})
	if got, ok, err := db.Position("t", s); err != nil || !ok || got != p || got.LeaderEpoch.Epoch() != 3 {
		t.Fatalf("after reopen Position = %+v, %v, %v; want %+v (leader epoch 3)", got, ok, err, p)
	}
}
