package task

import (
	"bytes"
	"testing"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/store"
)

// TestNextEpoch: an owner's epoch is above the highest read, keeping its era while the group
// generation orders owners, and starting the next era when it cannot (the same generation, a
// recreated group, a reset's generation 0).
func TestNextEpoch(t *testing.T) {
	for _, c := range []struct {
		highest uint64
		gen     int32
		want    uint64
	}{
		{0, 1, 1},                          // the first owner of an old or empty changelog
		{0, 0, 1 << 32},                    // a reset of an old changelog
		{0, -1, 1 << 32},                   // no generation known
		{5, 7, 7},                          // a later generation, same era
		{7, 7, 1<<32 | 7},                  // a static member back in the same generation
		{3<<32 | 9, 4, 4<<32 | 4},          // a recreated group: generations start again
		{3<<32 | 9, 12, 3<<32 | 12},        // the era kept
		{3<<32 | 9, 0, 4 << 32},            // a reset
		{4 << 32, 2, 4<<32 | 2},            // after a reset
		{1<<32 | 0xffffffff, 5, 2<<32 | 5}, // the highest generation of an era
	} {
		if got := nextEpoch(c.highest, c.gen); got != c.want || got <= c.highest {
			t.Errorf("nextEpoch(%s, %d) = %s, want %s", epochString(c.highest), c.gen, epochString(got), epochString(c.want))
		}
	}
}

// TestSnapshotRecord: a key snapshot's changelog record is the key changelogKey makes and the
// value EncodeSnapshot makes (what restores, this host's and older ones, read), made in one
// allocation once the scratch buffer has grown (before: 6 for this snapshot, its growing buffer,
// the key and the copy of both).
func TestSnapshotRecord(t *testing.T) {
	snap := store.KeySnapshot{Key: []byte("user-42"), Mark: 1234, HasMark: true, StateVersion: 3,
		Names:  []store.Write{{Name: []byte("count"), Value: []byte("12345678")}, {Name: []byte("last"), Value: bytes.Repeat([]byte("x"), 300)}},
		Timers: []store.Timer{{Key: []byte("user-42"), Name: []byte("t"), Domain: 1, Due: 99, Payload: []byte("p")}}}
	var scratch []byte
	kv, keyLen := snapshotRecord(&scratch, "input-topic", &snap)
	if want := changelogKey('k', "input-topic", snap.Key); !bytes.Equal(kv[:keyLen], want) {
		t.Fatalf("key %q, want %q", kv[:keyLen], want)
	}
	if want := store.EncodeSnapshot(nil, &snap); !bytes.Equal(kv[keyLen:], want) {
		t.Fatalf("value %x, want %x", kv[keyLen:], want)
	}
	if got, err := store.DecodeSnapshot(kv[keyLen:]); err != nil || got.Mark != 1234 || len(got.Names) != 2 || len(got.Timers) != 1 {
		t.Fatalf("DecodeSnapshot = %+v, %v", got, err)
	}
	if n := testing.AllocsPerRun(100, func() { kv, keyLen = snapshotRecord(&scratch, "input-topic", &snap) }); n != 1 {
		t.Errorf("snapshotRecord: %v allocations per record, want 1", n)
	}
}

// TestRestoringEpochs: a replay applies records at or above the highest epoch read, skips those
// below it (an earlier owner's after a later one's), and applies records without an epoch (0:
// written by a host before epochs) wherever they are.
func TestRestoringEpochs(t *testing.T) {
	db, err := store.Open("", store.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, err := db.StreamID("wc", "kafka:words/0")
	if err != nil {
		t.Fatal(err)
	}
	snap := func(v string) []byte {
		return store.EncodeSnapshot(nil, &store.KeySnapshot{Names: []store.Write{{Name: []byte("n"), Value: []byte(v)}}, Mark: 1, HasMark: true})
	}
	pos := func(next int64) []byte {
		return changelogPosition(store.Position{Next: next, Horizon: -1, Watermark: -1}, store.AppliedSet{})
	}
	rs := &restoring{db: db, task: "wc", id: id, topic: "words"}
	for i, r := range []struct {
		key   []byte
		value []byte
		epoch uint64
	}{
		{changelogKey('k', "words", []byte("a")), snap("old"), 0},   // before epochs
		{changelogKey('k', "words", []byte("b")), snap("b1"), 5},    // owner 5
		{changelogKey('p', "words", nil), pos(10), 5},               //
		{changelogKey('k', "words", []byte("b")), snap("b2"), 7},    // owner 7 takes over
		{changelogKey('p', "words", nil), pos(20), 7},               //
		{changelogKey('k', "words", []byte("b")), snap("stale"), 5}, // owner 5, removed, goes on
		{changelogKey('p', "words", nil), pos(12), 5},               //
		{changelogKey('k', "other", []byte("b")), snap("x"), 1},     // another input topic's
		{changelogKey('k', "words", []byte("c")), snap("c0"), 0},    // an older host during an upgrade
	} {
		if err := rs.add(r.key, r.value, kafka.RecordMeta{Epoch: r.epoch, LeaderEpoch: -1}, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := rs.flush(); err != nil {
		t.Fatal(err)
	}
	if rs.highest != 7 || rs.stale != 2 || rs.last == nil || rs.last.Next != 20 {
		t.Fatalf("highest %d, %d stale, last position %+v; want 7, 2, next 20", rs.highest, rs.stale, rs.last)
	}
	for key, want := range map[string]string{"a": "old", "b": "b2", "c": "c0"} {
		s, err := db.Snapshot("wc", id, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Names) != 1 || string(s.Names[0].Value) != want {
			t.Errorf("key %s restored as %+v, want %q", key, s.Names, want)
		}
	}
}

// TestStandbyClaimsPerLoop: the standby a task's loops share skips a partition while any loop
// holds it. A partition moving from loop a to loop b of the host, b's assignment (its claim)
// coming before a's revoke is over (its release): the standby must not take it back at a's
// release, while b owns it. A loop's claims are its own: claiming twice and releasing once frees
// the partition, and another partition is untouched.
func TestStandbyClaimsPerLoop(t *testing.T) {
	sb := NewSharedStandby().sb
	a, b := &Task{}, &Task{}
	p0, p1 := kafka.TopicPartition{Topic: "in", Partition: 0}, kafka.TopicPartition{Topic: "in", Partition: 1}
	claimed := func(tp kafka.TopicPartition) bool {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		return sb.claimed(tp)
	}
	sb.claim(a, p0)
	sb.claim(b, p0)
	sb.release(a, p0)
	if !claimed(p0) {
		t.Fatal("after loop a's release the standby would tail the partition loop b owns")
	}
	if claimed(p1) {
		t.Fatal("a partition no loop claimed is held")
	}
	sb.release(b, p0)
	if claimed(p0) {
		t.Fatal("released by every loop, the partition is still held: the standby would never tail it")
	}
	sb.claim(a, p1)
	sb.claim(a, p1) // an external reset's claim, then the restore's
	sb.release(a, p1)
	if claimed(p1) || len(sb.owned) != 0 {
		t.Fatalf("claims left after every release: %v", sb.owned)
	}
}

// TestRestoringPositionTopicID: a position record's key may carry the input topic's id after the
// topic (changelogPositionKey); a restore keeps it with the position, and a key without one (a
// host before ids, a reset) restores a position whose id is unknown (zero). The last position
// record wins either way.
func TestRestoringPositionTopicID(t *testing.T) {
	db, err := store.Open("", store.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, err := db.StreamID("wc", "kafka:words/0")
	if err != nil {
		t.Fatal(err)
	}
	topicID := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if k := changelogPositionKey("words", topicID); !bytes.Equal(k, append(changelogKey('p', "words", nil), topicID[:]...)) {
		t.Fatalf("position key %x", k)
	}
	if k := changelogPositionKey("words", [16]byte{}); !bytes.Equal(k, changelogKey('p', "words", nil)) {
		t.Fatalf("position key without an id %x", k)
	}
	pos := func(next int64) []byte {
		return changelogPosition(store.Position{Next: next, Horizon: -1, Watermark: -1}, store.AppliedSet{})
	}
	rs := &restoring{db: db, task: "wc", id: id, topic: "words"}
	if err := rs.add(changelogPositionKey("words", topicID), pos(10), kafka.RecordMeta{Epoch: 1, LeaderEpoch: 3}, 0); err != nil {
		t.Fatal(err)
	}
	if rs.last == nil || rs.last.Next != 10 || rs.last.TopicID != topicID || rs.last.LeaderEpoch.Epoch() != 3 {
		t.Fatalf("restored position %+v; want next 10 with the topic id and leader epoch 3", rs.last)
	}
	if err := rs.add(changelogPositionKey("words", [16]byte{}), pos(12), kafka.RecordMeta{Epoch: 1, LeaderEpoch: -1}, 1); err != nil {
		t.Fatal(err)
	}
	if rs.last.Next != 12 || rs.last.TopicID != ([16]byte{}) || rs.last.LeaderEpoch != 0 {
		t.Fatalf("restored position %+v; want next 12 without an id or a leader epoch", rs.last)
	}
}

// TestChangelogPositionValue: a position record's value carries the stream's applied set after
// the watermark (a format byte, then the set's words based at Next, none when empty), so it is
// never the 24 bytes a host before sets reads (it refuses any other length); a 24-byte value, an
// older host's, reads as a position with no set; other lengths and format bytes are refused.
func TestChangelogPositionValue(t *testing.T) {
	pos := store.Position{Next: 100, Horizon: 300, Watermark: 7}
	set := store.AppliedSet{Base: 90, Bits: []uint64{1 << 3, 1 << 12, 1<<41 | 1<<63, 1 << 2}} // 93 (below Next), 166, 259, 281, 284
	v := changelogPosition(pos, set)
	if len(v) == 24 {
		t.Fatal("a value with a set of 24 bytes: an older host would read it without the set")
	}
	got, gotSet, err := parseChangelogPosition(v)
	if err != nil || got != pos {
		t.Fatalf("position %+v, %v; want %+v", got, err, pos)
	}
	for o := int64(0); o < 400; o++ {
		if want := o >= pos.Next && set.Has(o); gotSet.Has(o) != want {
			t.Errorf("offset %d in the parsed set: %v, want %v", o, gotSet.Has(o), want)
		}
	}
	if gotSet.Base != pos.Next || gotSet.Len() != 4 {
		t.Errorf("parsed set from %d with %d offsets, want from %d with 4", gotSet.Base, gotSet.Len(), pos.Next)
	}
	if e := changelogPosition(pos, store.AppliedSet{}); len(e) != 25 {
		t.Errorf("a value with an empty set has %d bytes, want 25", len(e))
	}
	_, old, err := parseChangelogPosition(v[:24])
	if err != nil || old.Len() != 0 {
		t.Errorf("a 24-byte value (a host before sets): set of %d offsets, %v; want none", old.Len(), err)
	}
	bad := append([]byte(nil), v...)
	bad[24] = 2
	for _, b := range [][]byte{v[:23], v[:30], bad} {
		if _, _, err := parseChangelogPosition(b); err == nil {
			t.Errorf("a value of %d bytes (format byte %d) parsed", len(b), b[min(len(b)-1, 24)])
		}
	}
}
