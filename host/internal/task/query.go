package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
)

// Queries of state on a running task (the admin API's state endpoints).
//
// A query runs on the loop, which owns the cache: what it reads is every completed call's
// effects (the cache, whose writes the loop applied when each batch finished), not only the last
// checkpoint's. A key in a batch in flight is not read half-way through: its entry is pinned, and
// the query waits (t.queries) until no batch holds any of its keys, which step checks before it
// dispatches the next batches. Keys the cache does not hold are read from the store, which then
// holds their latest state (the cache never evicts an entry with uncommitted writes).

// NameValue is one state name of a key and its value.
type NameValue struct {
	Name, Value []byte
}

// KeyState is a key's state in one of the task's streams (a file input, a Kafka partition).
type KeyState struct {
	Stream string // the store's name of the stream: "file:<input>/0", "kafka:<topic>/<partition>"…
	Key    []byte
	Values []NameValue // in name order
}

// MaxQueryKeys bounds the keys one scan returns.
const MaxQueryKeys = 1000

// queryReq is a query waiting for the loop.
type queryReq struct {
	key    []byte // a single key; or, with scan:
	scan   bool
	prefix []byte // keys with this prefix
	after  []byte // and above this key (nil: from the first)
	limit  int
	keys   [][]byte // a scan's keys, once listed
	// owned, when set, limits the answer to these Kafka partitions (and, with local, the
	// task's file and stdin streams); the query fails with ErrNotOwned when one of them is not
	// assigned here.
	owned []kafka.TopicPartition
	only  bool // owned is set (even empty)
	local bool
	// group asks for the Kafka consumer only (Group).
	group bool
	reply chan []KeyState

	// Set by the loop before it replies.
	err      error
	consumer *kafka.Consumer
	streams  []string // the streams the answer covers, in the task's order
}

// ErrNotOwned is the error of a query for a Kafka partition this host does not own (any more,
// or not yet: it is being assigned or restored).
var ErrNotOwned = errors.New("the partition is not assigned to this host")

// ErrNoGroup is Group's error for a task without a Kafka input.
var ErrNoGroup = errors.New("the task has no kafka input")

// Query returns key's state in every stream of the task that has some, read between two calls on
// the key. Safe from any goroutine while Run runs; ErrStopped once it returned.
func (t *Task) Query(ctx context.Context, key []byte) ([]KeyState, error) {
	return t.query(ctx, &queryReq{key: bytes.Clone(key)})
}

// QueryScan returns the state of up to limit keys (at most MaxQueryKeys) that start with prefix
// and come after `after` (from the first when after is nil), in the store's key order (shorter
// keys first, then bytewise); a key with state in several streams appears once per stream. The
// next page starts after the last key returned. It walks every key of the task's streams up to
// the page's end, whatever the prefix.
func (t *Task) QueryScan(ctx context.Context, prefix, after []byte, limit int) ([]KeyState, error) {
	if limit <= 0 || limit > MaxQueryKeys {
		limit = MaxQueryKeys
	}
	return t.query(ctx, &queryReq{scan: true, prefix: bytes.Clone(prefix), after: bytes.Clone(after), limit: limit})
}

// QueryOwned is Query limited to the Kafka partitions owned and, with local, the task's file
// and stdin streams. It fails with ErrNotOwned (naming the partition) when one of owned is not
// assigned to this host now.
func (t *Task) QueryOwned(ctx context.Context, key []byte, owned []kafka.TopicPartition, local bool) ([]KeyState, error) {
	return t.query(ctx, &queryReq{key: bytes.Clone(key), owned: owned, only: true, local: local})
}

// QueryScanStreams is QueryScan that also returns the names of the streams it covered: those
// of the partitions assigned to this host, and its file and stdin inputs.
func (t *Task) QueryScanStreams(ctx context.Context, prefix, after []byte, limit int) ([]KeyState, []string, error) {
	if limit <= 0 || limit > MaxQueryKeys {
		limit = MaxQueryKeys
	}
	q := &queryReq{scan: true, prefix: bytes.Clone(prefix), after: bytes.Clone(after), limit: limit}
	ks, err := t.query(ctx, q)
	return ks, q.streams, err
}

// Group describes the task's consumer group (kafka.Consumer.Describe): which member owns which
// partition, at which advertised address. ErrNoGroup when the task has no Kafka input.
func (t *Task) Group(ctx context.Context) (kafka.GroupView, error) {
	q := &queryReq{group: true}
	if _, err := t.query(ctx, q); err != nil {
		return kafka.GroupView{}, err
	}
	if q.consumer == nil {
		return kafka.GroupView{}, ErrNoGroup
	}
	return q.consumer.Describe(ctx)
}

// Member returns the task's member id in its consumer group ("" until it joined): the host tells
// its own loops apart from other hosts in a Group view with it. ErrNoGroup when the task has no
// Kafka input.
func (t *Task) Member(ctx context.Context) (string, error) {
	q := &queryReq{group: true}
	if _, err := t.query(ctx, q); err != nil {
		return "", err
	}
	if q.consumer == nil {
		return "", ErrNoGroup
	}
	return q.consumer.MemberID(), nil
}

func (t *Task) query(ctx context.Context, q *queryReq) ([]KeyState, error) {
	q.reply = make(chan []KeyState, 1)
	select {
	case t.ctl <- request{kind: reqQuery, query: q}:
	case <-t.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-q.reply:
		return res, q.err
	case <-t.stopped:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startQuery handles a query in the loop: it answers at once unless a batch holds one of its
// keys, and then waits in t.queries.
func (t *Task) startQuery(q *queryReq) {
	if q.group {
		if t.kafka != nil {
			q.consumer = t.kafka.consumer
		}
		t.reply(func() { q.reply <- nil })
		return
	}
	if q.only {
		for _, tp := range q.owned {
			if t.kafka == nil || t.kafka.streams[tp] == nil {
				q.err = fmt.Errorf("%w: topic %s partition %d", ErrNotOwned, tp.Topic, tp.Partition)
				t.reply(func() { q.reply <- nil })
				return
			}
		}
	}
	if q.scan {
		if err := t.listKeys(q); err != nil {
			t.log.Warn("state query: listing keys", "err", err)
			t.reply(func() { q.reply <- nil })
			return
		}
	}
	if !t.answer(q) {
		t.queries = append(t.queries, q)
	}
}

// answerQueries answers the waiting queries none of whose keys a batch holds any more.
func (t *Task) answerQueries() {
	if len(t.queries) == 0 {
		return
	}
	t.queries = slices.DeleteFunc(t.queries, t.answer)
}

// listKeys lists a scan's keys, from the store and from the cache (keys written since the last
// checkpoint are only there), merged, in the store's key order (keyOrder), up to the limit. A
// prefix does not narrow the store's walk: keys sort by length first.
func (t *Task) listKeys(q *queryReq) error {
	// The store's keys are those of the checkpoints committed: the one in flight lands first
	// (a key it deletes would be listed otherwise).
	if err := t.awaitCheckpoint(); err != nil {
		return err
	}
	seen := map[string]bool{}
	var keys [][]byte
	add := func(k []byte) bool {
		if !bytes.HasPrefix(k, q.prefix) || (q.after != nil && keyOrder(k, q.after) <= 0) || seen[string(k)] {
			return false
		}
		seen[string(k)] = true
		keys = append(keys, bytes.Clone(k))
		return true
	}
	for _, st := range t.order {
		n := 0
		err := t.cfg.Store.Keys(t.cfg.Name, st.id, q.after, q.after == nil, func(k []byte) bool {
			if add(k) {
				n++
			}
			return n < q.limit
		})
		if err != nil {
			return err
		}
	}
	t.cache.Entries(func(e *statecache.Entry) bool {
		if _, ok := t.streams[e.Stream()]; ok && e.Loaded() && e.HasState() {
			add(e.Key())
		}
		return true
	})
	slices.SortFunc(keys, keyOrder)
	if len(keys) > q.limit {
		keys = keys[:q.limit]
	}
	q.keys = keys
	return nil
}

// keyOrder is the store's order of keys: by length, then bytewise.
func keyOrder(a, b []byte) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return bytes.Compare(a, b)
}

// answer replies to q and reports true, or reports false when a batch holds one of its keys.
func (t *Task) answer(q *queryReq) bool {
	keys := q.keys
	if !q.scan {
		keys = [][]byte{q.key}
	}
	for _, k := range keys {
		for _, st := range t.order {
			if e := t.cache.Peek(st.id, k); e != nil && e.Pinned() {
				return false
			}
		}
	}
	var res []KeyState
	q.streams = q.streams[:0]
	for _, st := range t.order {
		if q.covers(st) {
			q.streams = append(q.streams, st.storeName())
		}
	}
	for _, k := range keys {
		for _, st := range t.order {
			if !q.covers(st) {
				continue
			}
			ks := KeyState{Stream: st.storeName(), Key: k}
			collect := func(name, val []byte) bool {
				ks.Values = append(ks.Values, NameValue{Name: bytes.Clone(name), Value: bytes.Clone(val)})
				return true
			}
			if e := t.cache.Peek(st.id, k); e != nil && e.Loaded() {
				e.Scan(nil, nil, true, collect)
			} else if err := t.cfg.Store.Scan(t.cfg.Name, st.id, k, nil, nil, collect); err != nil {
				t.log.Warn("state query: reading the store", "key", shortKey(string(k)), "err", err)
				continue
			}
			if len(ks.Values) > 0 {
				res = append(res, ks)
			}
		}
	}
	t.reply(func() { q.reply <- res })
	return true
}

// covers reports whether the query answers for the stream.
func (q *queryReq) covers(st *stream) bool {
	if !q.only {
		return true
	}
	if !st.kafka {
		return q.local
	}
	return slices.Contains(q.owned, st.tp)
}

// storeName is the name the store knows the stream by (the offline state reader's).
func (st *stream) storeName() string {
	switch {
	case st.kafka:
		return kafkaStreamName(st.tp)
	case st.in.Stdin != nil:
		return StdinStream(st.in.Name)
	}
	return "file:" + st.in.Name + "/0"
}
