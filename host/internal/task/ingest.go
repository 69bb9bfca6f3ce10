package task

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/store"
)

func (t *Task) ingest(c source.Chunk) error {
	st := t.streams[c.Stream]
	if c.Err != nil {
		return fmt.Errorf("input %s: %w", st.in.Name, c.Err)
	}
	now := t.cfg.Now()
	for i := range c.Records {
		if err := t.admit(st, &c.Records[i], now); err != nil {
			return err
		}
	}
	if q := t.sched.Stats().QueuedItems; q > t.stats.PeakQueued {
		t.stats.PeakQueued = q
	}
	if c.Done {
		st.done = true
		t.log.Debug("input exhausted", "input", st.in.Name, "records", st.records)
		if how := st.print.changedWhileRead(st.in.Path, c.End); how != "" {
			t.log.Warn("input file "+how+"; the next run refuses a file at the path that no longer matches what was read, until the task is reset (wasmstream reset -c <config> --task "+t.cfg.Name+" --to earliest reads it from its first line)",
				"input", st.in.Name, "path", st.in.Path, "bytes_read", c.End)
		}
	}
	t.applyFlow()
	return nil
}

// admit routes one record: to the dead letters if malformed, past the guest if a replay of
// already applied work, and otherwise into its key's queue. now is when its chunk or fetch
// arrived: the clock is read once for all of them.
func (t *Task) admit(st *stream, r *source.Record, now time.Time) error {
	st.records++
	t.stats.Records++
	if err := st.tracker.Add(r.Offset); err != nil {
		return fmt.Errorf("input %s: %w", st.in.Name, err)
	}
	if !st.kafka {
		st.ends = append(st.ends, endMark{r.Offset, r.End})
	}
	if r.Err != nil {
		if st.in.HaltOnError {
			return fmt.Errorf("%s: %w", st.where(r.Offset), r.Err)
		}
		st.malform++
		if err := t.deadLetterLine(st, r); err != nil {
			return err
		}
		st.tracker.Complete(r.Offset)
		return nil
	}
	if len(r.Key) == 0 && r.Fields != nil && !st.keyWarned {
		t.warnNoKeyField(st, r)
	}
	if r.Fields != nil && (r.Timestamp >= secondsFrom && r.Timestamp < secondsTo || r.Timestamp >= microsFrom) {
		t.warnTimeUnit(st, r)
	}
	key, seq, err := t.sequence(st, r)
	if err != nil {
		return t.refuse(st, r.Offset, nil, r.Raw, r.ValueNull, err, true)
	}
	if room := store.StateKeyRoom(t.cfg.Name); len(key) > room {
		// The key could not even hold its mark in the store: refused here, not at a checkpoint.
		err := fmt.Errorf("%w: %d bytes, over the store's limit of %d bytes for a key in task %q (a key and each of its state names together)",
			ErrKeyTooLarge, len(key), room, t.cfg.Name)
		return t.refuse(st, r.Offset, key, r.Value, r.ValueNull, err, false)
	}
	if t.cfg.MaxFuture > 0 && r.Timestamp > now.Add(t.cfg.MaxFuture).UnixMilli() {
		err := fmt.Errorf("%w: timestamp %d (%s) is %s ahead of the clock, more than time.max_future (%s)", ErrFutureTimestamp,
			r.Timestamp, time.UnixMilli(r.Timestamp).UTC().Format(time.RFC3339), time.UnixMilli(r.Timestamp).Sub(now).Round(time.Second), t.cfg.MaxFuture)
		return t.refuse(st, r.Offset, key, r.Value, r.ValueNull, err, true)
	}
	stamp := st.tm.wm
	late := st.tm.observe(r.Offset, r.Timestamp, t.cfg.Lateness, now)
	if late {
		t.stats.Late++
	}
	if r.Offset <= st.replay && t.cfg.Policy != PolicyNone {
		// Applied before: in the stored applied set, or at or below its key's mark.
		skip := st.applied.Has(r.Offset)
		if !skip {
			mark, ok, err := t.cfg.Store.Mark(t.cfg.Name, st.id, key)
			if err != nil {
				return err
			}
			skip = ok && r.Offset <= mark
		}
		if skip {
			st.skipped++
			t.stats.Skipped++
			st.tracker.Complete(r.Offset)
			return nil
		}
	}
	return t.enqueue(st, r, key, seq, late, stamp)
}

// enqueue pushes an admitted record to its key's queue, then queues the event-time timers the
// record's timestamp made due.
func (t *Task) enqueue(st *stream, r *source.Record, key []byte, seq string, late bool, stamp int64) error {
	it := t.carve.item()
	it.stamp = stamp
	it.rec = abi.Record{
		Offset:    r.Offset,
		Timestamp: r.Timestamp,
		Source:    st.source,
		Key:       key,
		Value:     r.Value,
		Headers:   r.Headers,
	}
	it.end = r.End
	if late {
		it.rec.Flags |= abi.FlagLate
	}
	if r.ValueNull {
		it.rec.Flags |= abi.FlagValueNull // ABI 0.5: the record's value is null
	}
	if st.kafka {
		it.rec.Partition = uint32(st.tp.Partition)
	}
	t.pending++
	if err := t.sched.Push(sched.Item[*item]{
		Stream: st.id, Key: seq, Offset: r.Offset,
		Size:  len(r.Raw) + 128,
		Value: it,
	}); err != nil {
		return err
	}
	if late || r.Timestamp < 0 || st.tm.wm < 0 {
		return nil
	}
	// The record may have moved the watermark: event-time timers it passed are queued now,
	// behind this record and before the next one — all of them, whatever MaxFiringsPerTurn says:
	// a firing left for a later turn would come after records of its key read meanwhile. (A
	// timer set later is placed when its set is applied: placeFiring, ABI.md §4.12.)
	budget := math.MaxInt
	return t.collectDue(st, int(abi.DomainEvent), st.tm.watermark(), &budget)
}

// sequence returns a record's key and its sequencing key in the scheduler (S7); an error (the
// record has no field to sequence by) makes it malformed.
func (t *Task) sequence(st *stream, r *source.Record) (key []byte, seq string, err error) {
	if key, err = t.recordKey(st.kafka, r); err != nil {
		return nil, "", err
	}
	switch t.cfg.Policy {
	case PolicyPartition:
		return key, "", nil
	case PolicyNone:
		var b [20]byte
		return key, t.carve.string(strconv.AppendInt(b[:0], r.Offset, 10)), nil
	}
	return key, t.carve.string(key), nil
}

// recordKey returns the key a record's state and applied mark go by under the task's policy:
// the record's key, or with sequencing by field or header that field's or header's value (no
// such header: the empty key). It only reads the task's configuration (settleApplied calls it
// off the loop).
func (t *Task) recordKey(kafka bool, r *source.Record) ([]byte, error) {
	switch t.cfg.Policy {
	case PolicyField:
		if r.Fields == nil && kafka {
			if jerr := json.Unmarshal(r.Value, &r.Fields); jerr != nil || r.Fields == nil {
				return nil, fmt.Errorf("%w: sequencing by field %q: the value is not a JSON object", source.ErrMalformed, t.cfg.Field)
			}
		}
		return r.Field(t.cfg.Field)
	case PolicyHeader:
		for _, h := range r.Headers {
			if string(h.Name) == t.cfg.Header {
				return h.Value, nil
			}
		}
		return []byte{}, nil // no such header: the empty key
	}
	return r.Key, nil
}

// refuse halts the task on a record that cannot be admitted (with on_malformed: halt) or sends
// it to the dead letters with err, counting it as malformed if malformed says so.
func (t *Task) refuse(st *stream, offset int64, key, value []byte, valueNull bool, err error, malformed bool) error {
	if st.in.HaltOnError {
		return fmt.Errorf("%s: %w", st.where(offset), err)
	}
	if malformed {
		st.malform++
	}
	if err := t.deadLetter(st, offset, key, value, valueNull, err, 0); err != nil {
		return err
	}
	st.tracker.Complete(offset)
	return nil
}

// warnNoKeyField logs, once per input and run, a JSON line of the stream without its key field
// (r has the empty key): a mistaken key_field would otherwise give every record the empty key
// in silence, and would log every line if it were not once.
func (t *Task) warnNoKeyField(st *stream, r *source.Record) {
	if st.in == nil || !st.in.Format.JSON || st.in.Format.KeyField == "" {
		return
	}
	f := &st.in.Format
	if _, ok := r.Fields[f.KeyField]; ok {
		return
	}
	st.keyWarned = true
	hint := ""
	if strings.Contains(f.KeyField, ".") {
		hint = fmt.Sprintf("; fields are not looked up in nested objects: %q names a top-level field of that name", f.KeyField)
	}
	t.log.Warn("a line has no key field: its record has the empty key (key_required: true sends such lines to the dead letters instead); later lines without it are not logged"+hint,
		"at", st.where(r.Offset), "key_field", f.KeyField)
}

// A timestamp_field of milliseconds in [secondsFrom, secondsTo) falls between 1970-01-12 and
// 1973-03-03, where seconds since the epoch from 2001 to 5138 fall when read as milliseconds; one
// at or past microsFrom is after the year 5138, where microseconds and nanoseconds since the
// epoch from 1973 on fall. Neither is likely to be meant.
const (
	secondsFrom = 1e9
	secondsTo   = 1e11
	microsFrom  = 1e14
)

// warnTimeUnit logs, once per input, run and unit, a line whose timestamp_field looks like seconds,
// microseconds or nanoseconds since the epoch rather than milliseconds: read as milliseconds it is
// in 1970 (every such record is late behind one stamped right, and event-time windows span
// seconds where minutes were meant) or millennia ahead (the watermark jumps there for good).
func (t *Task) warnTimeUnit(st *stream, r *source.Record) {
	if st.kafka || st.in == nil || !st.in.Format.JSON || st.in.Format.TimestampField == "" {
		return
	}
	unit, as := uint8(1), "seconds (read as milliseconds it is in January 1970: multiply by 1000)"
	if r.Timestamp >= microsFrom {
		unit, as = 2, "microseconds or nanoseconds (read as milliseconds it is thousands of years ahead, and moves the watermark there: time.max_future refuses such records)"
	}
	if st.unitWarned&unit != 0 {
		return
	}
	st.unitWarned |= unit
	t.log.Warn("a timestamp looks like "+as+"; timestamp_field holds milliseconds since the epoch; later such lines are not logged",
		"at", st.where(r.Offset), "timestamp_field", st.in.Format.TimestampField, "timestamp", r.Timestamp,
		"as_milliseconds", time.UnixMilli(r.Timestamp).UTC().Format(time.RFC3339))
}

// ErrKeyTooLarge is the dead-letter cause of a record whose key is longer than the store can hold
// for the task (store.StateKeyRoom): refused when it is read.
var ErrKeyTooLarge = errors.New("record key too large")

// ErrFutureTimestamp is the dead-letter cause of a record stamped further ahead of the clock than
// Config.MaxFuture.
var ErrFutureTimestamp = errors.New("timestamp in the future")
