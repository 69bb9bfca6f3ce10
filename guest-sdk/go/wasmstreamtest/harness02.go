//go:build !wasip1

package wasmstreamtest

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// The ABI 0.2 side of the harness: timers and watermarks, ticks, state migrations, outbound HTTP.

// Timer is one timer of the harness; every field is a copy.
type Timer struct {
	// Partition is the partition of the call that set the timer (of the key's record in the
	// batch, of the firing, migration or tick).
	Partition uint32
	Key       []byte
	Name      string
	Domain    wasmstream.Domain
	// Time is when the timer fires, in ms since the epoch, in its domain.
	Time    int64
	Payload []byte
}

// String formats t for test failures.
func (t Timer) String() string {
	d := "processing"
	if t.Domain == wasmstream.EventTime {
		d = "event"
	}
	return fmt.Sprintf("%d/%q/%s@%d(%s) payload=%q", t.Partition, t.Key, t.Name, t.Time, d, t.Payload)
}

type timerID struct {
	partition uint32
	key, name string
}

func (t *Timer) id() timerID { return timerID{t.Partition, string(t.Key), t.Name} }

// maxFireRounds bounds FireDue: a handler that keeps setting timers already due would loop forever.
const maxFireRounds = 1000

// SetTimer sets a committed timer, e.g. to start a test from existing timers; it replaces the
// timer with the same partition, key and name.
func (h *Host) SetTimer(t Timer) {
	t.Key = append([]byte{}, t.Key...)
	t.Payload = append([]byte{}, t.Payload...)
	h.timers[t.id()] = &t
}

// Timers returns the committed timers sorted by partition, key (bytewise), then name. Every field
// is a copy.
func (h *Host) Timers() []Timer {
	out := make([]Timer, 0, len(h.timers))
	for _, t := range h.timers {
		c := *t
		c.Key, c.Payload = append([]byte{}, t.Key...), append([]byte{}, t.Payload...)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c < 0
		}
		return a.Name < b.Name
	})
	return out
}

// Now returns the harness's processing time (what wasmstream.NowMs returns).
func (h *Host) Now() int64 { return h.now }

// AdvanceTime sets the processing time to nowMs and fires the timers that are then due, as
// FireDue. Processing time never goes back: an earlier nowMs is an error.
func (h *Host) AdvanceTime(nowMs int64) (Result, error) {
	if nowMs < h.now {
		return Result{}, fmt.Errorf("wasmstreamtest: processing time cannot go back from %d to %d", h.now, nowMs)
	}
	h.now = nowMs
	return h.FireDue()
}

// Watermark returns the event-time watermark of partition (-1 until the test advances it).
func (h *Host) Watermark(partition uint32) int64 {
	if w, ok := h.watermarks[partition]; ok {
		return w
	}
	return -1
}

// AdvanceWatermark sets the watermark of partition to ms and fires the timers that are then due,
// as FireDue. A watermark never decreases: a lower ms is an error. The harness moves watermarks
// only when told: reading records does not move them, and Input.Late is what the test sets.
func (h *Host) AdvanceWatermark(partition uint32, ms int64) (Result, error) {
	if w := h.Watermark(partition); ms < w {
		return Result{}, fmt.Errorf("wasmstreamtest: the watermark of partition %d cannot go back from %d to %d", partition, w, ms)
	}
	h.watermarks[partition] = ms
	return h.FireDue()
}

// FireDue delivers every due timer to the timer handler: processing-time timers whose time is at
// or before Now, event-time timers whose time is at or before their partition's watermark. Each
// partition's due timers go in one wasmstream_on_timer call, ordered by time, then key, then name;
// a successful call deletes its timers unless the handler set them again. Timers the handler sets
// to a time already due fire in a following round. Timers fire only when a test calls FireDue,
// AdvanceTime or AdvanceWatermark, never on their own.
//
// The result gathers the outputs, logs and firings of all the calls. On a failed call FireDue
// stops and returns the error with the result of the calls before it (which are committed); the
// failed call's timers stay in place.
func (h *Host) FireDue() (Result, error) {
	if err := h.ready("wasmstream_on_timer"); err != nil {
		return Result{}, err
	}
	var total Result
	for round := 0; ; round++ {
		due := map[uint32][]Timer{}
		var parts []uint32
		for _, t := range h.timers {
			limit := h.now
			if t.Domain == wasmstream.EventTime {
				limit = h.Watermark(t.Partition)
			}
			if t.Time > limit {
				continue
			}
			if due[t.Partition] == nil {
				parts = append(parts, t.Partition)
			}
			due[t.Partition] = append(due[t.Partition], *t)
		}
		if len(parts) == 0 {
			total.State = h.State()
			return total, nil
		}
		if round == maxFireRounds {
			return total, fmt.Errorf("wasmstreamtest: timers still due after %d rounds of firing: does the timer handler keep setting timers to a time already due?", maxFireRounds)
		}
		sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		for _, p := range parts {
			res, err := h.fire(p, due[p])
			total.Outputs = append(total.Outputs, res.Outputs...)
			total.Logs = append(total.Logs, res.Logs...)
			total.Fired = append(total.Fired, res.Fired...)
			total.State = res.State
			if err != nil {
				return total, err
			}
		}
	}
}

// fire delivers the firings of one partition in one call.
func (h *Host) fire(partition uint32, ts []Timer) (Result, error) {
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if a.Time != b.Time {
			return a.Time < b.Time
		}
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c < 0
		}
		return a.Name < b.Name
	})
	h.beginUnit()
	payload := abi.AppendFiringsHeader(nil, len(ts))
	scope := map[string]uint32{}
	var keys []string
	for i := range ts {
		t := &ts[i]
		f := abi.Firing{Partition: t.Partition, Time: t.Time, Key: t.Key, Name: []byte(t.Name), Payload: t.Payload}
		if t.Domain == wasmstream.EventTime {
			f.Flags = abi.FiringEventTime
		}
		payload = abi.AppendFiring(payload, &f)
		if _, ok := scope[string(t.Key)]; !ok {
			scope[string(t.Key)] = partition
			keys = append(keys, string(t.Key))
		}
	}
	if err := h.migrateStale(keys, scope); err != nil {
		return Result{}, err
	}
	h.scope, h.partition = scope, partition
	if err := h.guestCall(phaseTimer, "wasmstream_on_timer", payload, host.Guest.OnTimer); err != nil {
		return Result{}, err
	}
	for i := range ts {
		if _, set := h.timerOps[ts[i].id()]; !set {
			h.timerOps[ts[i].id()] = nil
		}
	}
	h.fired = ts
	return h.commitUnit(), nil
}

// Tick calls the tick handler for partition with the harness's Now, the partition's watermark and
// source as the input name. During the tick every key is in scope and Tick.Keys lists every key
// with state (the harness does not track which partition a key belongs to). Keys whose state has
// another recorded state version are migrated first, in the same unit of work. On failure
// nothing changes.
func (h *Host) Tick(partition uint32, source string) (Result, error) {
	if err := h.ready("wasmstream_on_tick"); err != nil {
		return Result{}, err
	}
	h.beginUnit()
	keys := h.keysWithState()
	scope := map[string]uint32{}
	for _, k := range keys {
		scope[k] = partition
	}
	if err := h.migrateStale(keys, scope); err != nil {
		return Result{}, err
	}
	payload := abi.AppendTick(nil, &abi.Tick{Partition: partition, Now: h.now, Watermark: h.Watermark(partition),
		Source: []byte(source)})
	h.scopeAll, h.partition = true, partition
	if err := h.guestCall(phaseTick, "wasmstream_on_tick", payload, host.Guest.OnTick); err != nil {
		return Result{}, err
	}
	return h.commitUnit(), nil
}

// SetStateVersion sets the recorded state version of key, e.g. to start a test from state an
// older module wrote. Before any call involving a key that has state and whose recorded version
// differs from the module's (wasmstream.SetStateVersion), the harness calls the migration handler,
// as a host does (ABI.md §4.16); after a successful call the key's version is the module's.
func (h *Host) SetStateVersion(key string, v uint32) { h.versions[key] = v }

// StateVersion returns the recorded state version of key (0 when none was recorded).
func (h *Host) StateVersion(key string) uint32 { return h.versions[key] }

// MigrateAll migrates every key that has state recorded under another version than the module's,
// one unit of work per key in bytewise key order, as a host does when a task migrates eagerly.
// Migrations run in partition 0. On a failed migration it stops and returns the error with the
// result of the migrations before it (which are committed).
func (h *Host) MigrateAll() (Result, error) {
	if err := h.ready("wasmstream_migrate"); err != nil {
		return Result{}, err
	}
	var total Result
	for _, key := range h.keysWithState() {
		h.beginUnit()
		if err := h.migrateStale([]string{key}, map[string]uint32{key: 0}); err != nil {
			return total, err
		}
		res := h.commitUnit()
		total.Outputs = append(total.Outputs, res.Outputs...)
		total.Logs = append(total.Logs, res.Logs...)
	}
	total.State = h.State()
	return total, nil
}

// moduleVersion asks the guest for its state version.
func (h *Host) moduleVersion() uint32 {
	if host.Guest.StateVersion == nil {
		return 0
	}
	return uint32(host.Guest.StateVersion())
}

// migrateStale calls the migration handler, within the current unit, for each of keys that has
// state recorded under another version than the module's.
func (h *Host) migrateStale(keys []string, partitions map[string]uint32) error {
	to := h.moduleVersion()
	for _, key := range keys {
		from := h.versions[key]
		if from == to || !h.hasState(key) {
			continue
		}
		p := partitions[key]
		payload := abi.AppendMigrate(nil, &abi.Migrate{From: from, To: to, Partition: p, Key: []byte(key)})
		h.scope, h.partition = map[string]uint32{key: p}, p
		if err := h.guestCall(phaseMigrate, "wasmstream_migrate", payload, host.Guest.Migrate); err != nil {
			return err
		}
	}
	return nil
}

// hasState reports whether key has state as the guest sees it.
func (h *Host) hasState(key string) bool {
	for name := range h.state[key] {
		if _, ok := h.lookup(key, name); ok {
			return true
		}
	}
	for _, v := range h.writes[key] {
		if v != nil {
			return true
		}
	}
	return false
}

// keysWithState lists the keys that have state as the guest sees it, sorted bytewise.
func (h *Host) keysWithState() []string {
	seen := map[string]bool{}
	for key := range h.state {
		seen[key] = true
	}
	for key := range h.writes {
		seen[key] = true
	}
	var keys []string
	for key := range seen {
		if h.hasState(key) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	return keys
}

// TimerSet implements timer_set (ABI.md §4.10).
func (h *Host) TimerSet(key, name []byte, domain int32, at int64, payload []byte) int32 {
	if rc := h.access(key); rc != 0 {
		return rc
	}
	if domain != abi.DomainProcessing && domain != abi.DomainEvent {
		return int32(abi.ErrInvalid)
	}
	p, ok := h.scope[string(key)]
	if !ok {
		p = h.partition
	}
	t := &Timer{Partition: p, Key: append([]byte{}, key...), Name: string(name), Domain: wasmstream.Domain(domain),
		Time: at, Payload: append([]byte{}, payload...)}
	h.timerOps[t.id()] = t
	return 0
}

// TimerDelete implements timer_delete (ABI.md §4.11).
func (h *Host) TimerDelete(key, name []byte) int32 {
	if rc := h.access(key); rc != 0 {
		return rc
	}
	p, ok := h.scope[string(key)]
	if !ok {
		p = h.partition
	}
	h.timerOps[timerID{p, string(key), string(name)}] = nil
	return 0
}

// WatermarkMs implements watermark_ms (ABI.md §4.12): the watermark of the call's partition (for
// a batch, the partition of its first record), -1 during init.
func (h *Host) WatermarkMs() int64 {
	if !h.inCall() {
		return -1
	}
	return h.Watermark(h.partition)
}

// StateKeys implements state_keys (ABI.md §4.13).
func (h *Host) StateKeys(after []byte, fromFirst bool, buf []byte) int32 {
	if h.phase != phaseTick {
		return int32(abi.ErrNotAllowed)
	}
	var keys [][]byte
	for _, k := range h.keysWithState() {
		if fromFirst || k > string(after) {
			keys = append(keys, []byte(k))
		}
	}
	size, n := 8, 0
	for _, k := range keys {
		if size+abi.KeyPageEntrySize(k) > len(buf) {
			break
		}
		size += abi.KeyPageEntrySize(k)
		n++
	}
	if size > len(buf) || (n == 0 && len(keys) > 0) {
		return int32(abi.ErrBufferTooSmall)
	}
	return int32(copy(buf, abi.AppendKeyPage(nil, keys[:n], n < len(keys))))
}

// HTTPRequest implements http_request (ABI.md §4.14) with Options.HTTP in place of the network.
func (h *Host) HTTPRequest(req, buf []byte) int32 {
	h.httpKept = nil
	if !h.inCall() || h.opts.HTTP == nil {
		return int32(abi.ErrNotAllowed)
	}
	r, err := abi.DecodeHTTPRequest(req)
	if err != nil || !validMethod(r.Method) ||
		!(bytes.HasPrefix(r.URL, []byte("http://")) || bytes.HasPrefix(r.URL, []byte("https://"))) {
		return int32(abi.ErrInvalid)
	}
	in := &wasmstream.HTTPRequest{Method: string(r.Method), URL: string(r.URL), Body: append([]byte{}, r.Body...),
		Timeout: time.Duration(r.TimeoutMs) * time.Millisecond}
	for _, hd := range r.Headers {
		in.Headers = append(in.Headers, wasmstream.Header{Name: append([]byte{}, hd.Name...), Value: append([]byte{}, hd.Value...)})
	}
	resp, err := h.opts.HTTP(in)
	if err != nil {
		var code abi.Errno
		if errors.As(err, &code) && code < 0 {
			return int32(code)
		}
		return int32(abi.ErrUnavailable)
	}
	out := abi.HTTPResponse{Status: 200}
	if resp != nil {
		out = abi.HTTPResponse{Status: uint32(resp.Status), Headers: resp.Headers, Body: resp.Body}
	}
	b := abi.AppendHTTPResponse(nil, &out)
	if len(b) > len(buf) {
		h.httpKept = b
	} else {
		copy(buf, b)
	}
	return int32(len(b))
}

func validMethod(m []byte) bool {
	if len(m) == 0 {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// HTTPResponse implements http_response (ABI.md §4.15).
func (h *Host) HTTPResponse(buf []byte) int32 {
	if h.httpKept == nil {
		return int32(abi.ErrNotFound)
	}
	if len(h.httpKept) <= len(buf) {
		copy(buf, h.httpKept)
	}
	return int32(len(h.httpKept))
}
