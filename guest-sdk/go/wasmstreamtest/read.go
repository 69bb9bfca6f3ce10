//go:build !wasip1

package wasmstreamtest

import (
	"errors"
	"sort"
	"strings"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

// Get returns a copy of the committed state entry state[key][name] and whether it exists.
func (h *Host) Get(key, name string) ([]byte, bool) {
	v, ok := h.state[key][name]
	if !ok {
		return nil, false
	}
	return append([]byte{}, v...), true
}

// errReadOnly is what the writes of a Host.Read view return.
var errReadOnly = errors.New("wasmstreamtest: state read with Host.Read is read-only")

// Read returns a read-only view of the committed state of key, for reading what a task wrote with
// the SDK's typed state helpers:
//
//	n, err := wasmstream.Counter{Name: "count"}.Get(h.Read("alice"))
//
// Put and Delete on it fail.
func (h *Host) Read(key string) wasmstream.Store { return readView{h: h, key: key} }

type readView struct {
	h   *Host
	key string
}

func (r readView) Get(name string) ([]byte, bool, error) {
	v, ok := r.h.Get(r.key, name)
	return v, ok, nil
}

func (r readView) Put(string, []byte) error { return errReadOnly }

func (r readView) Delete(string) error { return errReadOnly }

func (r readView) Scan(prefix string, fn func(name, value []byte) bool) error {
	var names []string
	for name := range r.h.state[r.key] {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if !fn([]byte(name), append([]byte{}, r.h.state[r.key][name]...)) {
			return nil
		}
	}
	return nil
}

// Named returns the outputs emitted to the output called name, in emit order.
func (r Result) Named(name string) []Output {
	var out []Output
	for _, o := range r.Outputs {
		if o.Name == name {
			out = append(out, o)
		}
	}
	return out
}

// Values returns the values of the outputs emitted to name as strings, in emit order: handy for
// comparing with a literal list.
func (r Result) Values(name string) []string {
	var out []string
	for _, o := range r.Named(name) {
		out = append(out, string(o.Value))
	}
	return out
}
