package task

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
	"github.com/wasmstream/wasmstream/store"
)

// Changelogs (DESIGN S22). With a changelog, every checkpoint of a Kafka partition also goes to a
// compacted topic whose partition equals the input partition, before the group offsets it covers
// are committed; a host that is assigned the partition replays it into its store before the
// partition's first record, so the partition's state, timers, watermark and applied marks follow
// it from host to host.
//
// A changelog record is a whole key — every name, every timer, its applied mark and state version
// (store.KeySnapshot): the store's state, with the checkpoint before committed, and the
// checkpoint's change applied, written before the checkpoint commits to the store — so compaction
// keeps exactly the latest state of each key and replaying any suffix is idempotent. A checkpoint writes, per
// partition and in this order: a position record with the new horizon (and the old committed
// position), the snapshots of its changed keys, and the final position record. The producer keeps
// a partition's records in order, so a crash leaves a prefix, and any prefix restores to a state
// that replay makes exact: keys with new snapshots carry their new marks, and the horizon already
// covers them.
//
// Record keys: 'k' | u16 len(topic) | topic | key for a key snapshot, 'p' | u16 len(topic) | topic
// [| 16-byte topic id] for a position (several input topics share a changelog partition; the id
// when the writer knew it, changelogPositionKey). A position value is i64 Next | i64 Horizon |
// i64 Watermark, big-endian, then the byte 1 and the stream's applied set (changelogPosition),
// which a restore writes with the position: a key record written again from the store alone
// carries the stored mark, which the set may have left low.
//
// Owner epochs. Kafka fences a removed member's offset commits, not its changelog writes (plain
// produces under at least once), so a host removed from the group while still processing (a
// zombie: its revoke outlasted the rebalance timeout, or its session expired during a stall)
// could write a partition's changelog after the new owner took over, and every later restore
// would end with its stale keys and position. So each owner of an input partition writes every
// changelog record of it with its epoch (kafka.EpochHeader), and every reader ignores, per input
// partition, a record whose epoch is below the highest it has read there: the first record a new
// owner writes is its claim. The epoch (nextEpoch) is above every epoch the owner's restore read,
// which it reads to the end anyway, and orders owners by the group generation they were assigned
// the partition in, so that of two owners whose restores read the same changelog (the older one
// assigned, then removed before it wrote anything) the later owner still wins. Records without
// the header (epoch 0: written by a host before epochs) are all read, as before, wherever they
// are: a changelog from before epochs restores as it did, and so does one that hosts of both
// versions write during a rolling upgrade (a removed host of the older version is not kept out).

// ChangelogConfig turns on a task's changelog.
type ChangelogConfig struct {
	Topic       string
	Replication int16 // <= 0: the broker's default
	// Standby makes the host keep a warm copy of the partitions it does not own, tailing their
	// changelog, so that taking one over replays little.
	Standby bool
	// DropRevoked deletes a partition's local state when the partition is revoked or lost
	// (ignored with Standby, which keeps it warm); the next assignment restores it in full.
	DropRevoked bool
	// Shared, with Standby, is the standby the task shares with the other loops of the task on
	// this host (NewSharedStandby; nil: a standby of its own). Every loop claims in it the
	// partitions it owns; only the loop with Tails set runs the tailer, which tails the
	// partitions no loop claims. See SharedStandby.
	Shared *SharedStandby
	Tails  bool
}

// changelogSide is the loop's changelog state.
type changelogSide struct {
	topic string
	w     *kafka.ChangelogWriter
	next  map[int32]int64 // per changelog partition, the offset after the last acknowledged record

	standby *standby // nil unless ChangelogConfig.Standby
	tails   bool     // this loop runs the standby's tailer (runStandby) and reports its figures

	// fenced is checkOwners' finding that a later owner took one of this host's partitions
	// over: every later checkpoint fails with it (the one on the task's way out too).
	fenced error
}

// startChangelog checks the input topics are co-partitioned, creates or checks the changelog
// topic and opens its writer.
func (t *Task) startChangelog(ctx context.Context) error {
	cc, in := t.cfg.Changelog, t.cfg.Kafka
	parts := int32(-1)
	for _, topic := range in.Topics {
		n, err := kafka.PartitionCount(ctx, in.Client, topic)
		if err != nil {
			return fmt.Errorf("changelog: input topic %s: %w", topic, err)
		}
		if parts >= 0 && n != parts {
			return fmt.Errorf("changelog: input topics must have the same number of partitions (a changelog partition per input partition): %s has %d, %s has %d",
				in.Topics[0], parts, topic, n)
		}
		parts = n
	}
	if err := kafka.EnsureChangelog(ctx, in.Client, cc.Topic, parts, cc.Replication); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	w := t.txnChangelog // exactly once: the transactional consumer writes it
	if w == nil {
		var err error
		if w, err = kafka.NewChangelogWriter(in.Client, cc.Topic, in.DeliveryTimeout, t.log); err != nil {
			return fmt.Errorf("changelog: %w", err)
		}
	}
	t.changelog = &changelogSide{topic: cc.Topic, w: w, next: map[int32]int64{}}
	if cc.Standby {
		sb := newStandby()
		if cc.Shared != nil {
			sb = cc.Shared.sb
		}
		if cc.Shared == nil || cc.Tails {
			// Only the tailer's goroutine reads them (runStandby), started after this.
			sb.topics, sb.parts = in.Topics, parts
			t.changelog.tails = true
		}
		t.changelog.standby = sb
	}
	t.log.Info("changelog ready", "topic", cc.Topic, "partitions", parts)
	return nil
}

// growChangelog adds partitions to the changelog up to the input topics' count, at least p+1, and
// waits until the writer's client knows partition p.
func (t *Task) growChangelog(ctx context.Context, p int32) error {
	cc, in := t.cfg.Changelog, t.cfg.Kafka
	parts := p + 1
	for _, topic := range in.Topics {
		n, err := kafka.PartitionCount(ctx, in.Client, topic)
		if err != nil {
			return fmt.Errorf("input topic %s: %w", topic, err)
		}
		parts = max(parts, n)
	}
	if err := kafka.EnsureChangelog(ctx, in.Client, cc.Topic, parts, cc.Replication); err != nil {
		return err
	}
	t.log.Info("changelog partitions added for the partitions added to the input topics", "topic", cc.Topic, "partitions", parts)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return t.changelog.w.AwaitPartition(wctx, p)
}

func changelogKey(kind byte, topic string, key []byte) []byte {
	return appendChangelogKey(make([]byte, 0, changelogKeyLen(topic, key)), kind, topic, key)
}

func appendChangelogKey(b []byte, kind byte, topic string, key []byte) []byte {
	b = append(b, kind)
	b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	return append(b, key...)
}

func changelogKeyLen(topic string, key []byte) int { return 3 + len(topic) + len(key) }

// snapshotRecord returns the changelog record of a key snapshot as kafka.ChangelogWriter.WriteOwned
// takes it: its key (changelogKey 'k') then its value (store.EncodeSnapshot) in one buffer made
// for it, and the key's length. scratch is a buffer to encode in, kept from call to call.
func snapshotRecord(scratch *[]byte, topic string, snap *store.KeySnapshot) (kv []byte, keyLen int) {
	*scratch = store.EncodeSnapshot((*scratch)[:0], snap)
	keyLen = changelogKeyLen(topic, snap.Key)
	kv = appendChangelogKey(make([]byte, 0, keyLen+len(*scratch)), 'k', topic, snap.Key)
	return append(kv, *scratch...), keyLen
}

// changelogPositionKey is the key of a position record of an input topic's partition: 'p' |
// u16 len(topic) | topic, then the 16 bytes of the topic's id when known (a position written
// from a topic's id on carries it, so that a host that restores it can tell the topic was
// recreated since). Readers before the id ignore what follows a position key's topic.
func changelogPositionKey(topic string, id [16]byte) []byte {
	if id == ([16]byte{}) {
		return changelogKey('p', topic, nil)
	}
	return changelogKey('p', topic, id[:])
}

func parseChangelogKey(b []byte) (kind byte, topic string, key []byte, err error) {
	if len(b) < 3 {
		return 0, "", nil, errors.New("changelog record key too short")
	}
	n := int(binary.BigEndian.Uint16(b[1:]))
	if len(b) < 3+n {
		return 0, "", nil, errors.New("changelog record key truncated")
	}
	return b[0], string(b[3 : 3+n]), b[3+n:], nil
}

// changelogPosition is a position record's value: i64 Next | i64 Horizon | i64 Watermark,
// big-endian, then the format byte 1 and the words of the stream's applied set based at Next
// (store.AppliedSet, big-endian; none when it is empty). A key record written from the store
// alone carries the stored mark, which the set may have left low, so a restore needs the set with
// the position. Hosts before sets refuse any value but 24 bytes (the value has 25 or more), and
// fail the restore rather than restore those marks without the set.
func changelogPosition(p store.Position, set store.AppliedSet) []byte {
	set = set.At(p.Next)
	b := make([]byte, 0, positionValueLen+8*len(set.Bits))
	b = binary.BigEndian.AppendUint64(b, uint64(p.Next))
	b = binary.BigEndian.AppendUint64(b, uint64(p.Horizon))
	b = binary.BigEndian.AppendUint64(b, uint64(p.Watermark))
	b = append(b, positionFormat)
	for _, w := range set.Bits {
		b = binary.BigEndian.AppendUint64(b, w)
	}
	return b
}

const (
	positionFormat   = 1  // the byte after a position value's watermark: an applied set follows
	positionValueLen = 25 // a position value without its set's words (24: a host's before sets)
)

// writePosition writes the position record of pos, an input partition of topic, with the
// stream's applied set (changelogPosition), to changelog partition p with owner epoch epoch: its
// key with the topic's id, and the leader epoch of the input record before pos.Next in a header
// (kafka.LeaderEpochHeader), which a restore puts back into the position.
func writePosition(w *kafka.ChangelogWriter, p int32, topic string, pos store.Position, set store.AppliedSet, epoch uint64) {
	w.WritePosition(p, changelogPositionKey(topic, pos.TopicID), changelogPosition(pos, set), epoch, pos.LeaderEpoch.Epoch())
}

// parseChangelogPosition reads a position record's value (changelogPosition), or one of 24 bytes
// a host before applied sets wrote (no set: such a host kept no mark low by one).
func parseChangelogPosition(b []byte) (store.Position, store.AppliedSet, error) {
	switch {
	case len(b) > 24 && b[24] != positionFormat:
		return store.Position{}, store.AppliedSet{}, fmt.Errorf("changelog position of format %d, which this version does not know (a newer host wrote it?)", b[24])
	case len(b) != 24 && (len(b) < positionValueLen || (len(b)-positionValueLen)%8 != 0):
		return store.Position{}, store.AppliedSet{}, fmt.Errorf("changelog position of %d bytes", len(b))
	}
	p := store.Position{
		Next:      int64(binary.BigEndian.Uint64(b)),
		Horizon:   int64(binary.BigEndian.Uint64(b[8:])),
		Watermark: int64(binary.BigEndian.Uint64(b[16:])),
	}
	set := store.AppliedSet{Base: p.Next}
	for w := b[min(len(b), positionValueLen):]; len(w) > 0; w = w[8:] {
		set.Bits = append(set.Bits, binary.BigEndian.Uint64(w))
	}
	return p, set, nil
}

// changelogPlan is what a checkpoint writes to the changelog, gathered by the loop when it
// collects the checkpoint (planChangelog): the checkpoint goroutine that writes it
// (produceChangelog) reads no state of the loop's.
type changelogPlan struct {
	early []changelogRec    // a position record per partition, before the snapshots
	refs  []store.KeyRef    // the changed keys of Kafka partitions, their changes in Written
	at    []changelogRec    // per ref: its partition, topic and epoch (key and value made when written)
	final []changelogRec    // the positions the checkpoint commits, after the snapshots
	parts []int32           // per cp.Positions entry: its changelog partition, -1 if none
	cp    *store.Checkpoint // the checkpoint it belongs to
	owned []ownedPart       // the Kafka partitions this host owns (checkOwners); at least once only
}

// changelogRec is a changelog record: its partition, its owner epoch, and its key (or, for a
// key snapshot, the topic its key is made with); for an early position record, its stream and
// position (its value is made when written, with the stream's stored applied set).
type changelogRec struct {
	part   int32
	topic  string
	epoch  uint64
	key    []byte
	leader int32 // a position record's leader epoch (-1: unknown; writePosition)
	stream uint32
	pos    store.Position
}

// ownedPart is a Kafka partition this host owns as the loop saw it when it collected a
// checkpoint: what checkOwners and rewriteStale need of its stream.
type ownedPart struct {
	tp      kafka.TopicPartition
	id      uint32
	durable store.Position // its Epoch is this host's owner epoch of the partition
}

// planChangelog gathers what the checkpoint cp of Kafka partitions writes to the changelog:
// each partition's position as of its durable state (with the new horizon), then the whole state
// of every changed key (the store's with the change applied), then the positions the checkpoint
// commits, each record with its partition's owner epoch. Nil without a changelog or when cp has
// nothing of a Kafka partition.
func (t *Task) planChangelog(cp *store.Checkpoint) *changelogPlan {
	if t.changelog == nil {
		return nil
	}
	pl := &changelogPlan{cp: cp, parts: make([]int32, len(cp.Positions))}
	for i, sp := range cp.Positions {
		pl.parts[i] = -1
		st := t.streams[sp.Stream]
		if st == nil || !st.kafka {
			continue
		}
		pl.parts[i] = st.tp.Partition
		early := st.durable
		early.Horizon = max(early.Horizon, sp.Position.Horizon)
		if early.Next < 0 {
			// The partition's first checkpoint here, without a position before it: a restore
			// that ends on this record resumes where this host started the partition (a
			// position without an offset would fail the restore on every host).
			early.Next = st.origin
		}
		pl.early = append(pl.early, changelogRec{part: st.tp.Partition, epoch: st.durable.Epoch, key: changelogPositionKey(st.tp.Topic, early.TopicID),
			leader: early.LeaderEpoch.Epoch(), stream: st.id, pos: early})
		// The final record's value is made when written: the resume offset may move first.
		pl.final = append(pl.final, changelogRec{part: st.tp.Partition, topic: st.tp.Topic, epoch: sp.Position.Epoch})
	}
	pl.refs = make([]store.KeyRef, 0, len(cp.Keys))
	pl.at = make([]changelogRec, 0, len(cp.Keys))
	for i := range cp.Keys {
		kw := &cp.Keys[i]
		st := t.streams[kw.Stream]
		if st == nil || !st.kafka {
			continue
		}
		pl.refs = append(pl.refs, store.KeyRef{Stream: kw.Stream, Key: kw.Key, Written: kw})
		pl.at = append(pl.at, changelogRec{part: st.tp.Partition, topic: st.tp.Topic, epoch: st.durable.Epoch})
	}
	if len(pl.early) == 0 && len(pl.refs) == 0 {
		return nil
	}
	if !t.eos() && t.kafka != nil {
		for tp, st := range t.kafka.streams {
			pl.owned = append(pl.owned, ownedPart{tp: tp, id: st.id, durable: st.durable})
		}
	}
	return pl
}

// produceChangelog writes a checkpoint's Kafka partitions to the changelog (planChangelog) and
// waits for the acknowledgements, before the checkpoint commits to the store (then the group
// offsets): the store never holds a checkpoint the changelog lacks. A host killed between the
// two would otherwise resume from key states that no other host can restore, and write only the
// keys changed afterwards, behind positions that say the rest is there too (lost updates for
// the next owner). Then checkOwners looks at what other hosts wrote between this host's
// records. It returns the changelog partitions' next offsets; the positions' resume offsets
// move past the records written. It runs on the checkpoint goroutine (or inline), with the
// checkpoint before it committed to the store.
func (t *Task) produceChangelog(pl *changelogPlan) (map[int32]int64, error) {
	if t.changelog.fenced != nil {
		return nil, t.changelog.fenced
	}
	if err := t.writeChangelog(pl); err != nil {
		return nil, err
	}
	ctx := context.Background()
	next, err := t.changelog.w.FlushWithin(ctx)
	if err != nil {
		return nil, fmt.Errorf("changelog %s: producing the checkpoint failed; it is not committed: %w", t.changelog.topic, err)
	}
	if err := t.checkOwners(ctx, pl, next); err != nil {
		return nil, err
	}
	pl.resume(next)
	return next, nil
}

// errFenced stops checkOwners' read at the first record of a later owner.
var errFenced = errors.New("a later owner's record")

// checkOwners reads what other writers wrote between this host's changelog records, in each
// changelog partition where some did (kafka.ChangelogWriter.Gaps: after the end its restore read,
// or between two of its checkpoints), for records of the input partitions it owns. One with an
// epoch above this host's means that a later owner took the partition over: the group removed
// this host while it still processed (a zombie), and every reader ignores what it writes now.
// Then the checkpoint is not committed and the task stops, naming both epochs (a restart joins
// the group again). Otherwise the coverage of the local copy (each position's resume offset)
// may move past those records: they are other input topics' (a shared changelog partition), or
// an earlier owner's, which no reader applies after this host's; the keys such an earlier owner
// wrote are written again (rewriteStale) and their next offsets go into next. At least once
// only: under exactly once the transactions fence a removed host, and their markers take offsets
// too.
func (t *Task) checkOwners(ctx context.Context, pl *changelogPlan, next map[int32]int64) error {
	if len(pl.owned) == 0 {
		return nil
	}
	stale := map[*ownedPart]map[string]bool{}
	for p, from := range t.changelog.w.Gaps() {
		owned := map[string]*ownedPart{}
		for i := range pl.owned {
			if op := &pl.owned[i]; op.tp.Partition == p {
				owned[op.tp.Topic] = op
			}
		}
		if len(owned) == 0 {
			continue
		}
		var later error
		_, _, _, err := kafka.ReadChangelog(ctx, t.cfg.Kafka.Client, t.changelog.topic, p, from, func(key, _ []byte, meta kafka.RecordMeta, offset int64) error {
			epoch := meta.Epoch
			kind, topic, k, err := parseChangelogKey(key)
			st := owned[topic]
			if err != nil || st == nil {
				return nil
			}
			if epoch != 0 && epoch < st.durable.Epoch {
				// An earlier owner's: skipped by every reader, but once compacted it would
				// replace this host's record of the key.
				if stale[st] == nil {
					stale[st] = map[string]bool{}
				}
				if kind == 'k' {
					stale[st][string(k)] = true
				}
			}
			if epoch > st.durable.Epoch {
				later = fmt.Errorf("changelog %s partition %d offset %d: another host took input partition %s/%d over (its records carry owner epoch %s, above this host's %s): "+
					"the group removed this host while it still processed (a revoke longer than the rebalance timeout, or a session that expired during a stall), "+
					"so what it writes now is ignored by every reader; the checkpoint is not committed and the task stops (restart it, or its host, to join the group again)",
					t.changelog.topic, p, offset, topic, p, epochString(epoch), epochString(st.durable.Epoch))
				return errFenced
			}
			return nil
		}, nil)
		if later != nil {
			t.changelog.fenced = later
			return later
		}
		if err != nil {
			return fmt.Errorf("changelog %s partition %d: reading what other hosts wrote (from offset %d) failed; the checkpoint is not committed: %w",
				t.changelog.topic, p, from, err)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	return t.rewriteStale(ctx, pl.cp, stale, next)
}

// rewriteStale writes again, with this host's epoch, each key of its partitions that an earlier
// owner's records wrote between this host's changelog records, and each such partition's
// position, as the checkpoint cp commits them; then it flushes and adds the partitions' next
// offsets to next. Records after this host's first are skipped by every reader, but compaction
// keeps the latest record of each key: one left last would, once compacted, replace this host's
// record of its key, and a reader, skipping it, would restore no state for the key (or no
// position). Records before this host's first (written after its restore read the partition)
// are read, and their keys' states are not this host's: written again, the last record of each
// key is this host's.
func (t *Task) rewriteStale(ctx context.Context, cp *store.Checkpoint, stale map[*ownedPart]map[string]bool, next map[int32]int64) error {
	inCp := map[uint32]map[string]*store.KeyWrites{}
	for i := range cp.Keys {
		kw := &cp.Keys[i]
		if inCp[kw.Stream] == nil {
			inCp[kw.Stream] = map[string]*store.KeyWrites{}
		}
		inCp[kw.Stream][string(kw.Key)] = kw
	}
	var refs []store.KeyRef
	var keyStreams []*ownedPart
	for st, keys := range stale {
		for k := range keys {
			refs = append(refs, store.KeyRef{Stream: st.id, Key: []byte(k), Written: inCp[st.id][k]})
			keyStreams = append(keyStreams, st)
		}
	}
	recs := make([][]byte, len(refs))
	keyLens := make([]int, len(refs))
	var scratch []byte
	if err := t.cfg.Store.Snapshots(t.cfg.Name, refs, func(i int, snap *store.KeySnapshot) error {
		if refs[i].Written != nil {
			snap.Apply(refs[i].Written) // the key's state as this checkpoint commits it
		}
		recs[i], keyLens[i] = snapshotRecord(&scratch, keyStreams[i].tp.Topic, snap)
		return nil
	}); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	w := t.changelog.w
	for i, kv := range recs {
		st := keyStreams[i]
		w.WriteOwned(st.tp.Partition, kv, keyLens[i], st.durable.Epoch)
	}
	// Each position with the applied set the store holds with it (writeChangelog): the set the
	// checkpoint commits, or the stored one.
	sets, err := t.cfg.Store.AppliedAfter(cp)
	if err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	for st := range stale {
		pos, set, in := st.durable, store.AppliedSet{}, false
		for i, sp := range cp.Positions {
			if sp.Stream == st.id {
				pos, set, in = sp.Position, sets[i], true
			}
		}
		if !in {
			if set, err = t.cfg.Store.Applied(t.cfg.Name, st.id); err != nil {
				return fmt.Errorf("changelog: %w", err)
			}
		}
		if pos.Next >= 0 {
			writePosition(w, st.tp.Partition, st.tp.Topic, pos, set, st.durable.Epoch)
		}
	}
	more, err := w.Flush(ctx)
	if err != nil {
		return fmt.Errorf("changelog %s: writing again the keys an earlier owner wrote over failed; the checkpoint is not committed: %w", t.changelog.topic, err)
	}
	for p, n := range more {
		next[p] = max(next[p], n)
	}
	t.log.Warn("the changelog holds records an earlier owner of this host's partitions wrote after this host took them over (a host removed from the group while it still processed): their keys are written again",
		"changelog", t.changelog.topic, "keys", len(refs), "partitions", len(stale))
	return nil
}

// nextEpoch is the owner epoch of a partition assigned in group generation gen after its
// changelog's highest epoch read was highest: era<<32 | generation, so that epochs order by era,
// then generation. It keeps highest's era when gen is above highest's generation (the usual
// case: the coordinator raised the generation since the last owner was assigned) and otherwise
// starts the next era: after a static member rejoined without a rebalance (the same
// generation), a group recreated or renamed (generations start again), or a reset (gen 0). It is
// never 0, and always above highest.
func nextEpoch(highest uint64, gen int32) uint64 {
	g := uint32(max(gen, 0))
	if era := highest >> 32; g > uint32(highest) {
		return era<<32 | uint64(g)
	}
	return (highest>>32+1)<<32 | uint64(g)
}

// resume moves the resume offsets of the checkpoint's positions past the changelog records
// written, given the changelog partitions' next offsets (those before are in them already:
// collectPositions).
func (pl *changelogPlan) resume(next map[int32]int64) {
	for i := range pl.cp.Positions {
		if p := pl.parts[i]; p >= 0 {
			sp := &pl.cp.Positions[i]
			sp.Position.Resume = max(sp.Position.Resume, next[p])
		}
	}
}

// changelogWritten records the changelog's next offsets after a checkpoint's records (loop).
func (t *Task) changelogWritten(pl *changelogPlan, next map[int32]int64) {
	for p, n := range next {
		t.changelog.next[p] = max(t.changelog.next[p], n)
	}
	if pl != nil {
		t.stats.ChangelogRecords += int64(len(pl.refs))
	}
}

// writeChangelog writes what pl plans: the position records, then the store's state of every
// changed key, read in one transaction, with the change applied (the mark comes from the
// change: Apply sets it), then the final position records; each with its owner epoch. Each
// position record carries the applied set the store holds with it: an early one the stored set
// (its position is the stored one, with the new horizon), a final one the set the store holds
// once the checkpoint commits (store.DB.AppliedAfter).
func (t *Task) writeChangelog(pl *changelogPlan) error {
	w := t.changelog.w
	for _, r := range pl.early {
		set, err := t.cfg.Store.Applied(t.cfg.Name, r.stream)
		if err != nil {
			return fmt.Errorf("changelog: %w", err)
		}
		w.WritePosition(r.part, r.key, changelogPosition(r.pos, set), r.epoch, r.leader)
	}
	sets, err := t.cfg.Store.AppliedAfter(pl.cp)
	if err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	// Encoded first, written after: Write may block on the producer's buffer, which must not
	// happen while the store's read lock is held (a Close would wait on it).
	// Each record's key and value are made once, in one buffer the writer keeps (WriteOwned).
	recs := make([][]byte, len(pl.refs))
	keyLens := make([]int, len(pl.refs))
	var scratch []byte
	if err := t.cfg.Store.Snapshots(t.cfg.Name, pl.refs, func(i int, snap *store.KeySnapshot) error {
		snap.Apply(pl.refs[i].Written)
		recs[i], keyLens[i] = snapshotRecord(&scratch, pl.at[i].topic, snap)
		return nil
	}); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	for i, kv := range recs {
		r := &pl.at[i]
		w.WriteOwned(r.part, kv, keyLens[i], r.epoch)
	}
	j := 0
	for i, sp := range pl.cp.Positions {
		if pl.parts[i] < 0 {
			continue
		}
		r := &pl.final[j]
		j++
		writePosition(w, r.part, r.topic, sp.Position, sets[i], r.epoch)
	}
	return nil
}

// changelogRoom checks that the job's writes and timer operations leave each of its keys a
// state that one changelog record holds: the checkpoint writes a key's whole state (names,
// timers, mark) as one Kafka record, and one Kafka refuses would fail every checkpoint, or,
// after a restart that finds the records applied, leave the changelog without the key's
// latest state. A key that would outgrow it fails the job (limit, a record error: retried,
// then dead-lettered) with the key's state as it was. fatal is a store error.
func (t *Task) changelogRoom(j *job) (limit, fatal error) {
	for gi := range j.groups {
		g := &j.groups[gi]
		if t.streams[g.stream] != g.st || !g.st.kafka || (len(g.effects.Writes) == 0 && len(g.effects.Timers) == 0) {
			continue
		}
		if roomByBound(g) {
			continue
		}
		changes := map[string]*store.KeyWrites{}
		var order []string
		at := func(key []byte) *store.KeyWrites {
			kw := changes[string(key)]
			if kw == nil {
				kw = &store.KeyWrites{Key: key}
				changes[string(key)] = kw
				order = append(order, string(key))
			}
			return kw
		}
		for _, w := range g.effects.Writes {
			kw := at(w.Key)
			kw.Writes = append(kw.Writes, store.Write{Name: w.Name, Value: w.Value, Delete: w.Delete})
		}
		for _, op := range g.effects.Timers {
			kw := at(op.Key)
			kw.Timers = append(kw.Timers, store.TimerOp{Name: op.Name, Delete: op.Delete, Domain: uint8(op.Domain), Due: op.Due, Payload: op.Payload})
		}
		for _, key := range order {
			e := g.entryOf(key)
			if n, ok := e.SnapshotBytes(); ok && n+changeBytes(changes[key]) <= kafka.MaxRecordBatchBytes {
				continue // within the limit by the bound: no need to read the key's state
			}
			// The store must hold every checkpoint collected: the key's uncollected changes
			// are applied to its snapshot.
			if err := t.awaitCheckpoint(); err != nil {
				return nil, err
			}
			snap, err := t.cfg.Store.Snapshot(t.cfg.Name, g.stream, []byte(key))
			if err != nil {
				return nil, fmt.Errorf("changelog: %w", err)
			}
			pending := e.Uncollected()
			snap.Apply(&pending)
			snap.Apply(changes[key])
			v := store.EncodeSnapshot(nil, &snap)
			k := changelogKey('k', g.st.tp.Topic, []byte(key))
			n := kafka.RecordBytes(k, v, epochHeaders)
			if n > kafka.MaxRecordBatchBytes {
				return fmt.Errorf("%w: the state of key %q would take %d bytes in its changelog record, over the %d bytes a Kafka record holds: keep less state per key",
					modrt.ErrOverLimit, shortKey(key), n, kafka.MaxRecordBatchBytes), nil
			}
			e.SetSnapshotBytes(n) // the job's changes, applied next, raise it again: a bound
		}
	}
	return nil, nil
}

// epochHeaders stands for a changelog record's owner epoch header in the size of its record.
var epochHeaders = []kafka.Header{{Name: []byte(kafka.EpochHeader), Value: make([]byte, 8)}}

// roomByBound reports whether every key the group writes is within the changelog record's limit
// by its entry's bound alone, counting against each key what the whole group adds (more than
// its own share): the common case, checked without gathering the changes per key. False sends
// the group to changelogRoom's exact check.
func roomByBound(g *group) bool {
	add := 0
	for _, w := range g.effects.Writes {
		add += len(w.Name) + len(w.Value) + 16
	}
	for _, op := range g.effects.Timers {
		add += len(op.Name) + len(op.Payload) + 32
	}
	// The entries as the worker found them (writeEntry, timerEntry): no lookup by key.
	within := func(e *statecache.Entry) bool {
		n, ok := 0, false
		if e != nil {
			n, ok = e.SnapshotBytes()
		}
		return ok && n+add <= kafka.MaxRecordBatchBytes
	}
	for i := range g.effects.Writes {
		if !within(g.writeEntry(i)) {
			return false
		}
	}
	for i := range g.effects.Timers {
		if !within(g.timerEntry(i)) {
			return false
		}
	}
	return true
}

// changeBytes bounds what kw adds to a key's encoded snapshot.
func changeBytes(kw *store.KeyWrites) int {
	n := 0
	for _, w := range kw.Writes {
		n += len(w.Name) + len(w.Value) + 16
	}
	for _, op := range kw.Timers {
		n += len(op.Name) + len(op.Payload) + 32
	}
	return n
}

// shortKey cuts a key for an error message.
func shortKey(key string) string {
	if key == abi.NullKey {
		return "(null)"
	}
	if len(key) > 64 {
		return fmt.Sprintf("%s... (%d bytes)", key[:64], len(key))
	}
	return key
}

// restorePartition brings the local store's copy of a newly assigned partition up to date with
// the changelog (replayChangelog), on the loop, and counts it. It returns this owner's epoch of
// the partition (restoredPartition).
func (t *Task) restorePartition(tp kafka.TopicPartition, id uint32) (uint64, error) {
	r, err := t.replayOwned(context.Background(), tp, id)
	if err != nil {
		return 0, err
	}
	return t.restoredPartition(tp, r), nil
}

// replayOwned takes a newly assigned partition from the standby, if any, and replays its
// changelog. It touches only the store and the standby: exactly once, it runs beside the loop
// (assignAside).
func (t *Task) replayOwned(ctx context.Context, tp kafka.TopicPartition, id uint32) (replayed, error) {
	t.claimStandby(tp) // before the restore reads the store
	return t.replayChangelog(ctx, perCall{t.cfg.Kafka.Client}, tp, id, true)
}

// settleApplied writes the true marks of the keys whose records the partition's stored applied
// set holds (store.DB.SettleApplied, which then deletes the set), reading those records from
// the input partition. A changelog's position record carries the stream's set, which a restore
// writes with the position, in place of the stored one. That is exact for what the changelog
// holds, but not for a local copy that a run without the changelog changed since it last
// covered the changelog (the changelog turned off, then on again) and that a tail replay keeps:
// its keys the tail does not write keep marks that its own set, replaced, left low. So
// replayChangelog settles such a copy's set before that replay: every stored mark is then the
// key's true one. The set spans at most store.MaxAppliedSpan offsets: a read of as many records,
// once. Without a set, or with sequencing none (replay skips nothing), it does nothing.
func (t *Task) settleApplied(ctx context.Context, tp kafka.TopicPartition, id uint32) error {
	if t.cfg.Policy == PolicyNone {
		return nil
	}
	db, name := t.cfg.Store, t.cfg.Name
	set, err := db.Applied(name, id)
	if err != nil || set.Len() == 0 {
		return err
	}
	marks := map[string]int64{}
	room := store.StateKeyRoom(name)
	var rec source.Record
	began, said, read, span := time.Now(), time.Now(), 0, set.Last()+1-set.Base
	t.log.Info("a run without the changelog left an applied set: reading its records for their keys' marks", "topic", tp.Topic, "partition", tp.Partition,
		"offsets", set.Len(), "from", set.Base, "to", set.Last())
	err = kafka.ReadRange(ctx, t.cfg.Kafka.Client, tp.Topic, tp.Partition, set.Base, set.Last()+1, func(r *kafka.Record) error {
		if read++; read%4096 == 0 && time.Since(said) >= time.Second {
			said = time.Now()
			t.log.Info("settling the applied set", "topic", tp.Topic, "partition", tp.Partition, "offset", r.Offset,
				"read", r.Offset+1-set.Base, "of", span, "keys", len(marks), "elapsed", time.Since(began).Round(time.Millisecond))
		}
		if !set.Has(r.Offset) {
			return nil
		}
		sourceRecord(&rec, r)
		if rec.Err != nil {
			return nil // refused by admit: no key's mark
		}
		key, err := t.recordKey(true, &rec)
		if err != nil || len(key) > room {
			return nil // likewise
		}
		if m, ok := marks[string(key)]; !ok || r.Offset > m {
			marks[string(key)] = r.Offset
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("input %s partition %d: reading the records of the applied set a run without the changelog left: %w", tp.Topic, tp.Partition, err)
	}
	if err := db.SettleApplied(name, id, marks); err != nil {
		return err
	}
	t.log.Info("a run without the changelog left an applied set: its keys' marks written", "topic", tp.Topic, "partition", tp.Partition,
		"offsets", set.Len(), "keys", len(marks), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// changelogClient is what replayChangelog reads the changelog through: a client per call
// (perCall: a restore, once per assignment), or a standby's kafka.Admin, kept for its rounds.
type changelogClient interface {
	EndOffset(ctx context.Context, topic string, p int32) (int64, error)
	ReadChangelog(ctx context.Context, topic string, p int32, from int64,
		fn func(key, value []byte, meta kafka.RecordMeta, offset int64) error, progress func(records, bytes, total int64)) (int64, int64, int64, error)
	CheckChangelogStart(ctx context.Context, topic string, p int32, from int64) error
}

// perCall is a changelogClient that opens a client per call.
type perCall struct{ cfg kafka.Config }

func (c perCall) EndOffset(ctx context.Context, topic string, p int32) (int64, error) {
	return kafka.EndOffset(ctx, c.cfg, topic, p)
}

func (c perCall) ReadChangelog(ctx context.Context, topic string, p int32, from int64,
	fn func(key, value []byte, meta kafka.RecordMeta, offset int64) error, progress func(records, bytes, total int64),
) (int64, int64, int64, error) {
	return kafka.ReadChangelog(ctx, c.cfg, topic, p, from, fn, progress)
}

func (c perCall) CheckChangelogStart(ctx context.Context, topic string, p int32, from int64) error {
	return kafka.CheckChangelogStart(ctx, c.cfg, topic, p, from)
}

// claimStandby takes partition tp from the standby, if any, for this loop: a standby round of
// it in progress finishes first, and no other starts until the loop releases it
// (releasePartition).
func (t *Task) claimStandby(tp kafka.TopicPartition) {
	if t.changelog != nil && t.changelog.standby != nil {
		t.changelog.standby.claim(t, tp)
	}
}

// restoredPartition counts a partition's restore, on the loop, and returns this owner's epoch of
// the partition (nextEpoch of the highest epoch read and the group generation of the
// assignment), which every changelog record it writes of the partition carries.
func (t *Task) restoredPartition(tp kafka.TopicPartition, r replayed) uint64 {
	t.changelog.next[tp.Partition] = max(t.changelog.next[tp.Partition], r.end)
	t.changelog.w.Expect(tp.Partition, r.end) // records of others after it show in Gaps (checkOwners)
	t.stats.RestoredRecords += r.records
	t.stats.RestoredBytes += r.bytes
	t.stats.Restores++
	if r.full {
		t.stats.FullRestores++
	}
	gen := int32(-1)
	if t.kafka != nil && t.kafka.consumer != nil {
		gen = t.kafka.consumer.Generation()
	}
	epoch := nextEpoch(r.epoch, gen)
	if r.stale > 0 {
		t.log.Warn("the changelog holds records of an earlier owner written after a later one took the partition over (a host removed from the group while it still processed): ignored",
			"topic", tp.Topic, "partition", tp.Partition, "changelog", t.changelog.topic, "stale_records", r.stale)
	}
	return epoch
}

// epochString shows an owner epoch as era.generation.
func epochString(e uint64) string {
	return strconv.FormatUint(e>>32, 10) + "." + strconv.FormatUint(e&0xffffffff, 10)
}

// replayed is what one replayChangelog did.
type replayed struct {
	end, records, bytes int64
	full                bool
	epoch               uint64 // the highest owner epoch of the partition read (or the local copy's)
	stale               int64  // records ignored: an earlier owner's, after a later owner's
}

// replayChangelog brings the local store's copy of a partition up to date with the changelog:
// from the changelog offset this store last covered (a host that kept its disk, or a standby,
// replays only the tail), or from the start after dropping the local copy when there is none or it
// is ahead of the changelog (the topic was recreated). The position restored is the last one in
// the changelog, with the local horizon kept when higher (a guard: the store commits a
// checkpoint only after the changelog acknowledged it, so its horizon is not above the
// changelog's). It touches only the store (a standby calls it off the loop). owned: the restore
// of a partition this host is assigned, which logs its progress and adds the changelog
// partition when the changelog lacks it; a standby round (not owned) leaves a missing one to
// the partition's owner (the error wraps kafka.ErrNoPartition).
//
// It applies only records of owners at or above the highest epoch read so far (restoring.add),
// a tail replay starting from the epoch the local copy holds. The local copy itself needs no such
// check: this host commits a checkpoint to its store only after checkOwners found no later
// owner's record between its changelog records, so the copy, up to its resume offset, holds
// nothing that a later owner's records precede.
func (t *Task) replayChangelog(ctx context.Context, cc changelogClient, tp kafka.TopicPartition, id uint32, owned bool) (replayed, error) {
	db, name, topic := t.cfg.Store, t.cfg.Name, t.changelog.topic
	var r replayed
	var unpublished int64 // the changelog offset a copy changed since without the changelog covered
	pos, ok, err := db.Position(name, id)
	if err != nil {
		return r, err
	}
	r.end, err = cc.EndOffset(ctx, topic, tp.Partition)
	if errors.Is(err, kafka.ErrNoPartition) && owned {
		// Partitions were added to the input topics while the task ran: the changelog gets as
		// many (kafka.EnsureChangelog), the new ones empty like the new input partitions.
		if err = t.growChangelog(ctx, tp.Partition); err == nil {
			r.end, err = cc.EndOffset(ctx, topic, tp.Partition)
		}
	}
	if err != nil {
		return r, fmt.Errorf("changelog %s partition %d: %w", topic, tp.Partition, err)
	}
	if ok && pos.Resume < 0 {
		// The copy covered changelog offset -Resume, then a run without the changelog changed
		// it (collectPositions): the changes since are the copy's alone, unless an owner wrote
		// the changelog since (then its records replay over the copy, from there, as before).
		unpublished = -pos.Resume
		pos.Resume = unpublished
	}
	from := t.replayFrom(tp, pos, ok, r.end)
	if ok && (pos.Resume == 0 || unpublished > 0 && unpublished <= r.end) {
		// The local copy never covered a changelog offset (runs without the changelog wrote
		// it), or a run without it changed the copy since it last did. When the changelog
		// holds no position of the partition after what the copy covered, the changelog was
		// just turned on (again), or a publish of the copy was cut short: the copy holds the
		// partition's latest state, kept, and its owner publishes it (publishPartition).
		known, highest, err := t.changelogKnows(ctx, cc, tp, pos.Resume, r.end)
		if err != nil {
			return r, err
		}
		if !known {
			r.epoch = max(pos.Epoch, highest)
			if owned {
				if r.end, err = t.publishPartition(ctx, tp, id, pos, r.epoch); err != nil {
					return r, err
				}
			}
			return r, nil
		}
	}
	if unpublished > 0 && from > 0 {
		// A tail replay over a copy a run without the changelog changed, whose applied set the
		// changelog's replaces: its keys' marks go up to their true ones first (settleApplied).
		if err := t.settleApplied(ctx, tp, id); err != nil {
			return r, err
		}
	}
	began := time.Now()
	var progress func(records, bytes, total int64)
	if owned {
		progress = func(records, bytes, total int64) {
			el := time.Since(began)
			eta := time.Duration(0)
			if records > 0 && total > records {
				eta = time.Duration(float64(el) * float64(total-records) / float64(records))
			}
			t.log.Info("restoring partition", "topic", tp.Topic, "partition", tp.Partition, "changelog_records", records,
				"of", total, "bytes", bytes, "elapsed", el.Round(time.Millisecond), "remaining_estimate", eta.Round(time.Second))
		}
	}
	r.full = from == 0
	if !r.full && from == r.end {
		r.epoch = pos.Epoch
		return r, nil // nothing new
	}
	if err := cc.CheckChangelogStart(ctx, topic, tp.Partition, from); err != nil {
		var lost *kafka.ChangelogLostError
		if errors.As(err, &lost) {
			return r, t.changelogLost(tp, lost)
		}
		return r, fmt.Errorf("changelog %s partition %d: %w", topic, tp.Partition, err)
	}
	if r.full {
		if err := db.DropStream(name, id); err != nil {
			return r, err
		}
	}
	rs := &restoring{db: db, task: name, id: id, topic: tp.Topic}
	if !r.full {
		rs.highest = pos.Epoch
	}
	_, r.records, r.bytes, err = cc.ReadChangelog(ctx, topic, tp.Partition, from, rs.add, progress)
	if err != nil {
		return r, fmt.Errorf("changelog %s partition %d: restore: %w", topic, tp.Partition, err)
	}
	if err := rs.flush(); err != nil {
		return r, err
	}
	r.epoch, r.stale = rs.highest, rs.stale
	// A tail over a copy a run without the changelog changed leaves that run's changes to keys
	// the tail does not write in the copy alone, while the positions the copy's checkpoints
	// write from now on (their sets and Next) say they are applied: the copy is published, and
	// until then its resume offset stays negated, so that a host stopped before the publish
	// ends publishes at its next restore.
	changed := unpublished > 0 && !r.full
	resume := r.end
	if changed {
		resume = -r.end
	}
	if err := rs.finish(pos, ok && !r.full, r.records, resume); err != nil {
		return r, err
	}
	if changed && owned {
		restored, _, err := db.Position(name, id)
		if err != nil {
			return r, err
		}
		if r.end, err = t.publishPartition(ctx, tp, id, restored, r.epoch); err != nil {
			return r, err
		}
	}
	if owned {
		how := "tail"
		if r.full {
			how = "full"
		}
		t.log.Info("partition restored from the changelog", "topic", tp.Topic, "partition", tp.Partition, "restore", how,
			"changelog_records", r.records, "bytes", r.bytes, "took", time.Since(began).Round(time.Millisecond))
	}
	return r, nil
}

// errKnown stops changelogKnows' read at the partition's first position record.
var errKnown = errors.New("a position record of the partition")

// changelogKnows reports whether the changelog partition, which ends at end, holds from offset
// from on a position record of input topic tp.Topic: every owner writes one before the first
// key of a checkpoint, and publishPartition one after the last key it publishes, so without one
// the changelog holds none of the partition's state from there, or a publish cut short. It
// reads up to the first such record (at the start, where owners write one first) and returns
// the highest owner epoch it read of the topic's records.
func (t *Task) changelogKnows(ctx context.Context, cc changelogClient, tp kafka.TopicPartition, from, end int64) (bool, uint64, error) {
	if from >= end {
		return false, 0, nil
	}
	var highest uint64
	_, _, _, err := cc.ReadChangelog(ctx, t.changelog.topic, tp.Partition, from, func(key, _ []byte, meta kafka.RecordMeta, _ int64) error {
		kind, topic, _, err := parseChangelogKey(key)
		if err != nil || topic != tp.Topic {
			return nil
		}
		highest = max(highest, meta.Epoch)
		if kind == 'p' {
			return errKnown
		}
		return nil
	}, nil)
	switch {
	case errors.Is(err, errKnown):
		return true, highest, nil
	case err != nil:
		return false, 0, fmt.Errorf("changelog %s partition %d: looking for the partition's state: %w", t.changelog.topic, tp.Partition, err)
	}
	return false, highest, nil
}

// publishBatch is the number of keys publishPartition reads in one store transaction and
// flushes to the changelog at once.
const publishBatch = 1000

// publishPartition writes the whole local state of a partition whose state the changelog does
// not hold (changelogKnows) to the changelog, and returns the changelog partition's end after
// it: a record of every key (names, timers, mark) with the owner epoch this host's restore
// gives (nextEpoch of base and the group generation), in batches, each acknowledged before
// the next, then the partition's position record with the stored applied set (the keys' records
// carry their stored marks, which the set may have left low), and only then the local position's Resume
// (the changelog offset the copy covers). A host stopped in the middle leaves keys without
// the position record: the next owner whose copy covers no changelog offset publishes again,
// every key as stored (a key's record is its whole state: compaction keeps the last, and a
// restore of both gives the same). Progress is logged once a second.
func (t *Task) publishPartition(ctx context.Context, tp kafka.TopicPartition, id uint32, pos store.Position, base uint64) (int64, error) {
	db, name, topic := t.cfg.Store, t.cfg.Name, t.changelog.topic
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("changelog %s partition %d: publishing the local state of input %s partition %d, which the changelog does not hold: %w",
			topic, tp.Partition, tp.Topic, tp.Partition, err)
	}
	// The position record carries the stored applied set: the keys' records carry their stored
	// marks, which it may have left low (a run without the changelog left it).
	set, err := db.Applied(name, id)
	if err != nil {
		return fail(err)
	}
	keys, err := db.StreamKeys(name, id)
	if err != nil {
		return fail(err)
	}
	gen := int32(-1)
	if t.kafka != nil && t.kafka.consumer != nil {
		gen = t.kafka.consumer.Generation()
	}
	epoch := nextEpoch(base, gen)
	w, err := kafka.NewChangelogWriter(t.cfg.Kafka.Client, topic, t.cfg.Kafka.DeliveryTimeout, t.log)
	if err != nil {
		return fail(err)
	}
	defer w.Close()
	flush := func() (map[int32]int64, error) { return w.FlushWithin(ctx) }
	began, said := time.Now(), time.Now()
	var bytes int64
	refs := make([]store.KeyRef, 0, publishBatch)
	recs := make([][]byte, publishBatch)
	keyLens := make([]int, publishBatch)
	var scratch []byte
	for at := 0; at < len(keys); at += publishBatch {
		refs = refs[:0]
		for _, k := range keys[at:min(at+publishBatch, len(keys))] {
			refs = append(refs, store.KeyRef{Stream: id, Key: k})
		}
		// Encoded first, written after (as writeChangelog): a write may block.
		if err := db.Snapshots(name, refs, func(i int, snap *store.KeySnapshot) error {
			recs[i], keyLens[i] = snapshotRecord(&scratch, tp.Topic, snap)
			return nil
		}); err != nil {
			return fail(err)
		}
		for i, kv := range recs[:len(refs)] {
			if n := kafka.RecordBytes(kv[:keyLens[i]], kv[keyLens[i]:], epochHeaders); n > kafka.MaxRecordBatchBytes {
				return fail(fmt.Errorf("the state of key %q takes %d bytes in its changelog record, over the %d bytes a Kafka record holds: "+
					"a changelog cannot carry this partition's state (keep less state per key, or run the task without the changelog)",
					shortKey(string(refs[i].Key)), n, kafka.MaxRecordBatchBytes))
			}
			w.WriteOwned(tp.Partition, kv, keyLens[i], epoch)
			bytes += int64(len(kv))
			recs[i] = nil // the writer's now
		}
		if _, err := flush(); err != nil {
			return fail(err)
		}
		if done := at + len(refs); time.Since(said) >= time.Second && done < len(keys) {
			said = time.Now()
			t.log.Info("publishing partition state to the changelog", "topic", tp.Topic, "partition", tp.Partition, "changelog", topic,
				"keys", done, "of", len(keys), "bytes", bytes, "elapsed", time.Since(began).Round(time.Millisecond))
		}
	}
	writePosition(w, tp.Partition, tp.Topic, pos, set, epoch)
	next, err := flush()
	if err != nil {
		return fail(err)
	}
	end, ok := next[tp.Partition]
	if !ok {
		return fail(errors.New("the position record was not acknowledged"))
	}
	pos.Resume, pos.Epoch = end, max(pos.Epoch, epoch)
	if err := db.Restore(name, id, nil, &pos); err != nil {
		return fail(err)
	}
	t.log.Info("partition state published to the changelog (the changelog had none of it)", "topic", tp.Topic, "partition", tp.Partition,
		"changelog", topic, "keys", len(keys), "bytes", bytes, "owner_epoch", epochString(epoch), "took", time.Since(began).Round(time.Millisecond))
	return end, nil
}

// changelogLost is the error of a restore that would start below the changelog partition's log
// start while the topic is not compacted alone (kafka.CheckChangelogStart): the records between
// held state that is gone, so the partition is not restored (the task halts) rather than
// restored in part.
func (t *Task) changelogLost(tp kafka.TopicPartition, e *kafka.ChangelogLostError) error {
	return fmt.Errorf("input topic %s partition %d: its state cannot be restored: changelog topic %s partition %d lost offsets %d to %d "+
		"(%d offsets: its log start is %d, and the restore starts at %d) to retention or a DeleteRecords, its cleanup.policy being %s: "+
		"restoring what is left would give the keys of those records partial or stale state, so the task halts; "+
		"set cleanup.policy=compact alone on the changelog (kafka-configs --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact), "+
		"then restore the state from a backup of a host's data directory, or rebuild it from the input if it still holds every record "+
		"(wasmstream reset --task %s --to earliest): %w",
		tp.Topic, tp.Partition, e.Topic, e.Partition, e.From, e.Start-1, e.Start-e.From, e.Start, e.From, e.Policy, e.Topic, t.cfg.Name, e)
}

// replayFrom is the changelog offset a replay starts at: where this store's copy of the
// partition last caught up (pos, if ok), or 0 (a full restore) when there is no such offset or it
// lies beyond the changelog's end (the topic was recreated).
func (t *Task) replayFrom(tp kafka.TopicPartition, pos store.Position, ok bool, end int64) int64 {
	switch {
	case ok && pos.Resume > 0 && pos.Resume <= end:
		return pos.Resume
	case ok && pos.Resume > end:
		t.log.Warn("the changelog is shorter than this store's copy (recreated?): restoring the partition from scratch",
			"topic", tp.Topic, "partition", tp.Partition, "changelog", t.changelog.topic, "local_offset", pos.Resume, "end", end)
	}
	return 0
}

// restoring applies the records of one partition's changelog replay to the store: key snapshots
// in batches of restoreBatch, and the last position record seen.
type restoring struct {
	db    *store.DB
	task  string
	id    uint32
	topic string // the input topic: other topics' records in a shared changelog partition are skipped
	snaps []store.KeySnapshot
	last  *store.Position
	// lastSet is last's applied set (the stream's applied offsets at or above last.Next), which
	// the restore writes with it.
	lastSet store.AppliedSet

	// highest is the highest owner epoch read (a tail replay starts from the local copy's): a
	// record below it is an earlier owner's, written after a later owner took over, and is
	// ignored (counted in stale). A record without an epoch (0) is read whatever highest is.
	highest uint64
	stale   int64
}

// restoreBatch is the number of key snapshots restored in one store transaction.
const restoreBatch = 1000

// add takes one changelog record (kafka.ReadChangelog's callback).
func (rs *restoring) add(key, value []byte, meta kafka.RecordMeta, offset int64) error {
	epoch := meta.Epoch
	kind, topic, k, err := parseChangelogKey(key)
	if err != nil {
		return fmt.Errorf("offset %d: %w", offset, err)
	}
	if topic != rs.topic {
		return nil
	}
	if epoch != 0 {
		// Epoch 0: a host before owner epochs wrote it (no header), and it is read as then, so
		// that a group that mixes versions during an upgrade loses nothing.
		if epoch < rs.highest {
			rs.stale++
			return nil
		}
		rs.highest = epoch
	}
	switch kind {
	case 'k':
		// A tombstone (written by a reset, ResetChangelog) restores to no state: an empty
		// snapshot, which deletes the key's names, timers and mark.
		s := store.KeySnapshot{Mark: store.NoneApplied}
		if value != nil {
			if s, err = store.DecodeSnapshot(value); err != nil {
				return fmt.Errorf("offset %d: %w", offset, err)
			}
		}
		s.Key = append([]byte(nil), k...)
		rs.snaps = append(rs.snaps, s)
		if len(rs.snaps) >= restoreBatch {
			return rs.flush()
		}
	case 'p':
		p, set, err := parseChangelogPosition(value)
		if err != nil {
			return fmt.Errorf("offset %d: %w", offset, err)
		}
		if len(k) == len(p.TopicID) {
			copy(p.TopicID[:], k) // the topic's id, when the writer knew it
		}
		p.LeaderEpoch = store.KnownLeaderEpoch(meta.LeaderEpoch) // when the writer knew it
		rs.last, rs.lastSet = &p, set
	default:
		return fmt.Errorf("offset %d: unknown changelog record kind %q", offset, kind)
	}
	return nil
}

// flush restores the key snapshots gathered since the last flush.
func (rs *restoring) flush() error {
	if len(rs.snaps) == 0 {
		return nil
	}
	err := rs.db.Restore(rs.task, rs.id, rs.snaps, nil)
	rs.snaps = rs.snaps[:0]
	return err
}

// finish writes the position a replay leaves in the store (restoredPosition), its resume
// offset end: the changelog's last position record with its applied set (store.RestoreApplied:
// the set replaces the stored one), or the local position with the stored set kept. local is
// the store's position before the replay; tail says the replay kept the local copy.
func (rs *restoring) finish(local store.Position, tail bool, records, end int64) error {
	last := restoredPosition(rs.last, local, tail, records)
	if last == nil {
		return nil
	}
	last.Resume = end
	last.Epoch = max(last.Epoch, rs.highest)
	if rs.last == nil {
		return rs.db.Restore(rs.task, rs.id, nil, last)
	}
	return rs.db.RestoreApplied(rs.task, rs.id, nil, *last, rs.lastSet)
}

// restoredPosition is the position a replay leaves in the store, or nil to leave none (the
// group's offsets then decide where to start): the changelog's last position record, with the
// local horizon kept when higher on a tail replay (a guard, see replayChangelog); on a tail
// replay with no position record, the local one; on a full replay with none, the start of the
// partition if any key was restored.
func restoredPosition(last *store.Position, local store.Position, tail bool, records int64) *store.Position {
	switch {
	case last != nil:
		if tail {
			last.Horizon = max(last.Horizon, local.Horizon)
		}
		return last
	case tail:
		return &local
	case records == 0:
		return nil // nothing anywhere
	}
	return &store.Position{Next: 0, Horizon: -1, Watermark: -1}
}

// standby keeps this host's store close to the changelog for the partitions it does not own
// (ChangelogConfig.Standby), so that taking one over replays only a short tail.
//
// Two writers of one partition's stream in the store are never allowed, so the standby never
// tails a partition a loop of this host owns. A loop claims a partition (claim) before any of its
// store writes for it (the restore of an assignment, an external reset's move) and releases it
// (release) after its last one (dropStream: after the last checkpoint of a revoke or a loss has
// committed, or the stream of an earlier ownership is dropped). A claim takes mu, which a
// standby round holds for the whole round of one partition, so when claim returns the round in
// progress has ended and no other starts: the tailer checks the owners under mu before each
// round.
//
// With several loops per host (ChangelogConfig.Shared) the loops share one standby and only one
// loop runs its tailer: several tailers would be several writers of one stream. owned holds,
// per partition, the set of loops that claimed it, not a flag, and the tailer skips a partition
// while any loop holds it. So in the window of a rebalance where a partition moves from loop A
// to loop B of the host, and B's assignment comes before A's revoke is over (the group gave it
// to B while A still drained, or A was removed from the group as a zombie), A's release leaves
// B's claim in place: the standby tails the partition only once no loop claims it.
type standby struct {
	mu     sync.Mutex // held by a catch-up round of one partition, and by a loop to claim or release one
	owned  map[kafka.TopicPartition]map[*Task]bool
	topics []string
	parts  int32 // the input topics' partition count: at the start, raised by standbyCount (runStandby's goroutine)
	// lost: the partitions whose changelog lost records the standby needs (kafka.ChangelogLostError),
	// said once each (under mu): the standby's copy stays where it was, and the partition's owner
	// halts on it at its next restore.
	lost map[kafka.TopicPartition]bool
	// Figures, read by the tailing loop for Stats.
	records, bytes atomic.Int64
}

func newStandby() *standby {
	return &standby{owned: map[kafka.TopicPartition]map[*Task]bool{}, lost: map[kafka.TopicPartition]bool{}}
}

// claim records that loop t owns tp, once a round of it in progress ended.
func (sb *standby) claim(t *Task, tp kafka.TopicPartition) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.owned[tp] == nil {
		sb.owned[tp] = map[*Task]bool{}
	}
	sb.owned[tp][t] = true
}

// release records that loop t no longer owns tp; the standby tails it again once no loop does.
func (sb *standby) release(t *Task, tp kafka.TopicPartition) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	delete(sb.owned[tp], t)
	if len(sb.owned[tp]) == 0 {
		delete(sb.owned, tp)
	}
}

// claimed reports whether a loop owns tp: the standby leaves it alone. mu is held.
func (sb *standby) claimed(tp kafka.TopicPartition) bool { return len(sb.owned[tp]) > 0 }

// SharedStandby is the standby of a task's loops on one host (ChangelogConfig.Shared): one
// tailer, run by one loop, fed with the partitions every loop of the host owns. A new one for
// every run of the loops (a loop that ended keeps its claims: its partitions are skipped, never
// written twice, until the next run starts with a new one).
type SharedStandby struct{ sb *standby }

// NewSharedStandby returns a standby for the loops of one run of a task.
func NewSharedStandby() *SharedStandby { return &SharedStandby{sb: newStandby()} }

// runStandby catches up every partition the loop does not own, once a second, until ctx ends.
// Every kafka.DefaultMetadataMaxAge it counts the input topics' partitions again
// (standbyCount), so that it tails the partitions added to them while the host runs as soon as
// the group can assign them. Its rounds and counts go through one client (kafka.Admin) for as
// long as it runs: a client per request opened a connection or two per partition every second.
func (t *Task) runStandby(ctx context.Context, sb *standby) {
	adm, err := kafka.NewAdmin(t.cfg.Kafka.Client)
	if err != nil {
		t.log.Error("standby: no client; the standby tails nothing", "err", err)
		return
	}
	defer adm.Close()
	counted := time.Now()
	for {
		if time.Since(counted) >= kafka.DefaultMetadataMaxAge {
			counted = time.Now()
			t.standbyCount(ctx, adm, sb)
		}
		for _, topic := range sb.topics {
			for p := int32(0); p < sb.parts; p++ {
				tp := kafka.TopicPartition{Topic: topic, Partition: p}
				if ctx.Err() != nil {
					return
				}
				sb.mu.Lock()
				if !sb.claimed(tp) {
					id, err := t.cfg.Store.StreamID(t.cfg.Name, kafkaStreamName(tp))
					var r replayed
					if err == nil {
						r, err = t.replayChangelog(ctx, adm, tp, id, false)
					}
					if errors.Is(err, kafka.ErrNoPartition) {
						// A partition added to the input topics whose changelog partition no
						// owner added yet: nothing to tail.
						err = nil
					}
					var lost *kafka.ChangelogLostError
					switch {
					case err == nil || ctx.Err() != nil:
					case errors.As(err, &lost) && sb.lost[tp]:
						// Said once: nothing changes until the changelog is restored.
					case errors.As(err, &lost):
						sb.lost[tp] = true
						t.log.Error("standby: the changelog lost records this host's copy of a partition needs; the copy stays as it is", "topic", topic, "partition", p, "err", err)
					default:
						t.log.Warn("standby: catching up a partition failed; retrying", "topic", topic, "partition", p, "err", err)
					}
					sb.records.Add(r.records)
					sb.bytes.Add(r.bytes)
				}
				sb.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// standbyCount raises the standby's partition count to the input topics' when partitions were
// added to them: their changelog partitions are tailed from then on (once an owner's restore
// added them to the changelog: skipped until then). A failure to count is logged and tried
// again at the next count.
func (t *Task) standbyCount(ctx context.Context, adm *kafka.Admin, sb *standby) {
	n := sb.parts
	for _, topic := range sb.topics {
		c, err := adm.PartitionCount(ctx, topic)
		if err != nil {
			if ctx.Err() == nil {
				t.log.Warn("standby: counting the input topic's partitions failed; partitions added to it are tailed once a count succeeds", "topic", topic, "err", err)
			}
			return
		}
		n = max(n, c)
	}
	if n > sb.parts {
		t.log.Info("standby: partitions were added to the input topics; tailing their changelog too", "partitions", n, "before", sb.parts)
		sb.parts = n
	}
}

// releasePartition hands a partition the loop no longer owns back to the standby, or deletes its
// local state (DropRevoked).
func (t *Task) releasePartition(tp kafka.TopicPartition, id uint32) {
	if t.changelog == nil {
		return
	}
	if t.changelog.standby == nil {
		if t.cfg.Changelog.DropRevoked {
			if err := t.cfg.Store.DropStream(t.cfg.Name, id); err != nil {
				t.log.Warn("dropping a revoked partition's local state failed; the next assignment replaces it anyway",
					"topic", tp.Topic, "partition", tp.Partition, "err", err)
			} else {
				t.stats.Dropped++
			}
		}
		return
	}
	t.changelog.standby.release(t, tp)
}

// changelogProgress reports, for every partition of the input topics the local store holds a
// copy of, the changelog offset the copy covers: the standby balancer gives a partition that
// changes hands to the host furthest along. It reads only the store: the group calls it from its
// own goroutine at every join.
func (t *Task) changelogProgress() map[kafka.TopicPartition]int64 {
	out := map[kafka.TopicPartition]int64{}
	streams, err := t.cfg.Store.Streams(t.cfg.Name)
	if err != nil {
		return out
	}
	for _, s := range streams {
		name, ok := strings.CutPrefix(s.Name, "kafka:")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(name, '/')
		p, err := strconv.ParseInt(name[i+1:], 10, 32)
		if i < 0 || err != nil || !slices.Contains(t.cfg.Kafka.Topics, name[:i]) {
			continue
		}
		if pos, ok, err := t.cfg.Store.Position(t.cfg.Name, s.ID); err == nil && ok && pos.Resume > 0 {
			out[kafka.TopicPartition{Topic: name[:i], Partition: int32(p)}] = pos.Resume
		}
	}
	return out
}
