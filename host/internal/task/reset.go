package task

import (
	"context"
	"fmt"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/store"
)

// Resetting a task's changelog (`wasmstream reset`). A reset moves a partition's local state
// aside and restarts it at another offset; the changelog must then hold nothing of the old
// state, or a host that restores the partition from it (a new owner, a standby, a host with an
// empty disk) would bring the old state back. So the reset writes, to each partition it resets,
// a tombstone (a null value) for every key the changelog still holds a snapshot of, then a
// position record at the new offset with no horizon and no watermark. A restore replays these
// like any other records: a tombstone replaces the key's whole state with nothing (names,
// timers and mark deleted), the position record sets where the partition resumes. Compaction
// eventually drops the old snapshots and, after delete.retention.ms, the tombstones. The reset's
// records carry an owner epoch of a new era (nextEpoch(highest, 0)), above every owner's so far,
// and the keys it reads are those a restore reads (records of earlier owners after a later
// owner's are not).

// ChangelogReset is what ResetChangelog wrote to one changelog partition.
type ChangelogReset struct {
	Tombstones int64 // keys whose snapshot was tombstoned
	Read       int64 // changelog records read to find them
	End        int64 // the changelog partition's offset after the reset's records
	// Epoch is the owner epoch the reset's records carry: a position that resumes the changelog
	// at End must carry it (store.Position.Epoch), or the next owner, which reads nothing before
	// End, would take an epoch below it and every reader would ignore its records.
	Epoch uint64
}

// ResetChangelog makes partition tp.Partition of changelog topic restore to no state at offset
// next of tp: it reads the partition, then writes a tombstone for each key of tp.Topic whose
// latest record is a snapshot, and a position record {Next: next, Horizon: -1, Watermark: -1}.
// With dryRun it only counts. The host must not be running the task (its checkpoints would
// write the old state again).
func ResetChangelog(ctx context.Context, cfg kafka.Config, topic string, tp kafka.TopicPartition, next int64, dryRun bool) (ChangelogReset, error) {
	var r ChangelogReset
	live := map[string]bool{}
	var highest uint64
	_, n, _, err := kafka.ReadChangelog(ctx, cfg, topic, tp.Partition, 0, func(key, value []byte, meta kafka.RecordMeta, offset int64) error {
		epoch := meta.Epoch
		kind, t, k, err := parseChangelogKey(key)
		if err != nil {
			return fmt.Errorf("offset %d: %w", offset, err)
		}
		if t != tp.Topic || (epoch != 0 && epoch < highest) {
			return nil // another topic's, or an earlier owner's after a later one's: no restore reads it
		}
		highest = max(highest, epoch)
		if kind == 'k' {
			live[string(k)] = value != nil
		}
		return nil
	}, nil)
	r.Read = n
	if err != nil {
		return r, fmt.Errorf("changelog %s partition %d: %w", topic, tp.Partition, err)
	}
	for _, on := range live {
		if on {
			r.Tombstones++
		}
	}
	if dryRun {
		return r, nil
	}
	w, err := kafka.NewChangelogWriter(cfg, topic, 0, nil)
	if err != nil {
		return r, err
	}
	defer w.Close()
	// The reset's records carry an epoch above every owner's so far (a new era): restores read
	// them, and ignore whatever an earlier owner might still write after them.
	epoch := nextEpoch(highest, 0)
	r.Epoch = epoch
	for k, on := range live {
		if on {
			w.WriteEpoch(tp.Partition, changelogKey('k', tp.Topic, []byte(k)), nil, epoch)
		}
	}
	w.WriteEpoch(tp.Partition, changelogKey('p', tp.Topic, nil), changelogPosition(store.Position{Next: next, Horizon: -1, Watermark: -1}), epoch)
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ends, err := w.Flush(fctx)
	if err != nil {
		return r, fmt.Errorf("changelog %s partition %d: %w", topic, tp.Partition, err)
	}
	r.End = ends[tp.Partition]
	return r, nil
}
