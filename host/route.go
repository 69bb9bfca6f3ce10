package host

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/wasmstream/wasmstream/host/internal/admin"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/task"
)

// State queries across a group of hosts (docs/queries.md). A key of a task with a Kafka input
// lives, for each of the input's topics, in the partition the default partitioner hashes it to
// (murmur2, as Kafka's producers place keyed records). The host asked describes the task's
// consumer group (the coordinator's current generation: each member's assignment and the admin
// address it advertises, admin.advertise_addr), answers for the partitions it owns itself and
// forwards the query for the others to their owners, merging the answers. Whatever cannot be
// answered now by the partition's owner — a rebalance in progress, a partition without an owner
// or still being assigned or restored, an owner that advertises no address — is a 503 with
// Retry-After (ErrStateUnavailable): never the state a former owner kept. A scan asks every
// owner for the same page and merges them (routedScan).

// ErrStateUnavailable is the error of a state query whose key's partition has no owner that
// can answer now (admin API: 503 with Retry-After). Retry.
var ErrStateUnavailable = errors.New("wasmstream: the key's partition has no owner that can answer now (a rebalance, a restore or a host starting): retry")

// forwardClient forwards state queries to their owners.
var forwardClient = &http.Client{Timeout: queryTimeout}

// advertiseAddr is the admin address this host advertises to its groups: admin.advertise_addr,
// or the address the API listens on unless it is a wildcard ("" then, and while the API is not
// listening).
func (h *Host) advertiseAddr() string {
	if a := h.cfg.Admin.AdvertiseAddr; a != "" {
		return a
	}
	addr := h.AdminAddr()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	return addr
}

// forwardAuth is the Authorization a forwarded query presents: the read-only token when one is
// configured (a query needs no more, and the full token then never travels), else the client's.
func (h *Host) forwardAuth(r *http.Request) string {
	if tok := h.cfg.Admin.ReadToken; tok != "" {
		return "Bearer " + tok
	}
	return r.Header.Get("Authorization")
}

// routedState answers the admin API's query of key's state in task name, from the hosts that
// own the key's partitions (this one or others), or, for a query another host forwarded, from
// the partitions it names, owned here.
func (h *Host) routedState(r *http.Request, name string, key []byte) ([]admin.KeyState, error) {
	forwarded := r.Header.Get(admin.ForwardedHeader) != ""
	_, run, t, err := h.enterRunning(name)
	if err != nil {
		if forwarded && errors.Is(err, ErrNotRunning) {
			err = fmt.Errorf("%w: %v", ErrStateUnavailable, err)
		}
		return nil, err
	}
	defer h.leave()
	kin := h.kafkaInput(run)
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	if forwarded {
		parts, err := parsePartitions(r.URL.Query()["partition"])
		if err != nil {
			return nil, &admin.Error{Status: http.StatusBadRequest, Err: err}
		}
		ks, err := t.QueryOwned(ctx, key, parts, false)
		if err = queryError(name, err); errors.Is(err, ErrNotRunning) {
			// Stopping: the partitions are still this host's in the group, not for long.
			err = fmt.Errorf("%w: %v", ErrStateUnavailable, err)
		}
		return wireKeyStates(ks), err
	}
	if kin == nil {
		ks, err := t.Query(ctx, key)
		return wireKeyStates(ks), queryError(name, err)
	}
	view, err := t.Group(ctx)
	switch {
	case errors.Is(err, task.ErrStopped), errors.Is(err, context.DeadlineExceeded):
		return nil, queryError(name, err)
	case err != nil: // the coordinator did not answer
		return nil, fmt.Errorf("%w: task %s: %v", ErrStateUnavailable, name, err)
	}
	if !view.Stable() {
		return nil, fmt.Errorf("%w: task %s: its group is rebalancing (%s)", ErrStateUnavailable, name, view.State)
	}
	var local []kafka.TopicPartition
	remote := map[string][]kafka.TopicPartition{}
	for _, topic := range kin.Topics {
		p, ok := view.KeyPartition(topic, key)
		if !ok {
			continue // the topic does not exist (yet): no state
		}
		tp := kafka.TopicPartition{Topic: topic, Partition: p}
		m, ok := view.Owners[tp]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: task %s: topic %s partition %d is not assigned to any host", ErrStateUnavailable, name, topic, p)
		case m.ID == view.Self:
			local = append(local, tp)
		case m.Addr == "":
			return nil, fmt.Errorf("%w: task %s: topic %s partition %d is owned by group member %s, which advertises no admin address (admin.advertise_addr)",
				ErrStateUnavailable, name, topic, p, m.ID)
		default:
			remote[m.Addr] = append(remote[m.Addr], tp)
		}
	}
	qks, err := t.QueryOwned(ctx, key, local, true)
	if err != nil {
		return nil, queryError(name, err)
	}
	ks := wireKeyStates(qks)
	addrs := make([]string, 0, len(remote))
	for a := range remote {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	for _, addr := range addrs {
		fks, err := admin.ForwardState(ctx, forwardClient, addr, h.forwardAuth(r), h.advertiseAddr(), name, key, partitionNames(remote[addr]))
		if err != nil {
			var ae *admin.Error
			if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
				return nil, fmt.Errorf("%w: task %s: %v", ErrStateUnavailable, name, err)
			}
			return nil, err
		}
		ks = append(ks, fks...)
	}
	slices.SortStableFunc(ks, func(a, b admin.KeyState) int { return cmp.Compare(a.Stream, b.Stream) })
	return ks, nil
}

// partitionNames names partitions as a forwarded query does: "topic/partition".
func partitionNames(tps []kafka.TopicPartition) []string {
	out := make([]string, len(tps))
	for i, tp := range tps {
		out[i] = tp.Topic + "/" + strconv.Itoa(int(tp.Partition))
	}
	return out
}

func parsePartitions(names []string) ([]kafka.TopicPartition, error) {
	out := make([]kafka.TopicPartition, 0, len(names))
	for _, n := range names {
		i := strings.LastIndexByte(n, '/')
		p, err := strconv.ParseInt(n[i+1:], 10, 32)
		if i <= 0 || err != nil || p < 0 {
			return nil, fmt.Errorf("partition %q: want topic/partition", n)
		}
		out = append(out, kafka.TopicPartition{Topic: n[:i], Partition: int32(p)})
	}
	return out, nil
}

// routedScan answers the admin API's scan of task name: for a task with a Kafka input, a page
// merged from every host that owns partitions of its topics (this one and the others), which
// must cover each partition exactly once (else 503: one moved meanwhile); for a forwarded scan
// or a task without one, a page of this host's streams.
func (h *Host) routedScan(r *http.Request, name string, prefix, after []byte, limit int) ([]admin.KeyState, []string, error) {
	forwarded := r.Header.Get(admin.ForwardedHeader) != ""
	_, run, t, err := h.enterRunning(name)
	if err != nil {
		if forwarded && errors.Is(err, ErrNotRunning) {
			err = fmt.Errorf("%w: %v", ErrStateUnavailable, err)
		}
		return nil, nil, err
	}
	defer h.leave()
	kin := h.kafkaInput(run)
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	if forwarded || kin == nil {
		ks, streams, err := t.QueryScanStreams(ctx, prefix, after, limit)
		if err = queryError(name, err); forwarded && errors.Is(err, ErrNotRunning) {
			err = fmt.Errorf("%w: %v", ErrStateUnavailable, err)
		}
		return wireKeyStates(ks), streams, err
	}
	view, err := t.Group(ctx)
	switch {
	case errors.Is(err, task.ErrStopped), errors.Is(err, context.DeadlineExceeded):
		return nil, nil, queryError(name, err)
	case err != nil:
		return nil, nil, fmt.Errorf("%w: task %s: %v", ErrStateUnavailable, name, err)
	case !view.Stable():
		return nil, nil, fmt.Errorf("%w: task %s: its group is rebalancing (%s)", ErrStateUnavailable, name, view.State)
	}
	want := map[string]bool{} // every partition's stream, to be covered once
	remote := map[string]bool{}
	for _, topic := range kin.Topics {
		for p := range view.Partitions[topic] {
			tp := kafka.TopicPartition{Topic: topic, Partition: p}
			want[partitionNames([]kafka.TopicPartition{tp})[0]] = true
			m, ok := view.Owners[tp]
			switch {
			case !ok:
				return nil, nil, fmt.Errorf("%w: task %s: topic %s partition %d is not assigned to any host", ErrStateUnavailable, name, topic, p)
			case m.ID == view.Self:
			case m.Addr == "":
				return nil, nil, fmt.Errorf("%w: task %s: topic %s partition %d is owned by group member %s, which advertises no admin address (admin.advertise_addr)",
					ErrStateUnavailable, name, topic, p, m.ID)
			default:
				remote[m.Addr] = true
			}
		}
	}
	qks, streams, err := t.QueryScanStreams(ctx, prefix, after, limit)
	if err != nil {
		return nil, nil, queryError(name, err)
	}
	ks := wireKeyStates(qks)
	for _, addr := range slices.Sorted(maps.Keys(remote)) {
		fks, fstreams, err := admin.ForwardScan(ctx, forwardClient, addr, h.forwardAuth(r), h.advertiseAddr(), name, prefix, after, limit)
		if err != nil {
			var ae *admin.Error
			if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
				return nil, nil, fmt.Errorf("%w: task %s: %v", ErrStateUnavailable, name, err)
			}
			return nil, nil, err
		}
		ks = append(ks, fks...)
		streams = append(streams, fstreams...)
	}
	covered := map[string]int{}
	for _, s := range streams {
		if tp, ok := strings.CutPrefix(s, "kafka:"); ok {
			covered[tp]++
		}
	}
	for tp := range want {
		if covered[tp] != 1 {
			return nil, nil, fmt.Errorf("%w: task %s: partition %s is answered for by %d hosts (it is moving)", ErrStateUnavailable, name, tp, covered[tp])
		}
	}
	// The page: every host's first keys, merged in the store's key order, up to limit keys.
	ks = firstKeys(ks, func(k *admin.KeyState) ([]byte, string) { return k.Key, k.Stream }, limit)
	slices.Sort(streams)
	return ks, streams, nil
}

// firstKeys sorts pages merged from several places (hosts, loops) in the store's order of keys,
// then streams, and keeps the entries of the first limit keys.
func firstKeys[K any](ks []K, of func(*K) (key []byte, stream string), limit int) []K {
	slices.SortStableFunc(ks, func(a, b K) int {
		ak, as := of(&a)
		bk, bs := of(&b)
		return cmp.Or(keyOrder(ak, bk), cmp.Compare(as, bs))
	})
	keys := 0
	for i := range ks {
		k, _ := of(&ks[i])
		if i > 0 {
			if prev, _ := of(&ks[i-1]); bytes.Equal(k, prev) {
				continue
			}
		}
		if keys == limit {
			return ks[:i]
		}
		keys++
	}
	return ks
}

// keyOrder is the store's order of keys: by length, then bytewise.
func keyOrder(a, b []byte) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), bytes.Compare(a, b))
}

// kafkaInput returns run's Kafka input, nil if it has none (a restart replaces run.tcfg).
func (h *Host) kafkaInput(run *running) *task.KafkaInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	if run.tcfg == nil {
		return nil
	}
	return run.tcfg.Kafka
}
