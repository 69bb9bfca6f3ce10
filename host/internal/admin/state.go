package admin

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/internal/statedecode"
)

// The state endpoints: a running task's state, read between two calls on a key.
//
//	GET /v1/tasks/{task}/state/{key}                      a key's state (404 when it has none)
//	GET /v1/tasks/{task}/state?prefix=&after=&limit=      a page of keys with their state
//
// Keys, names and values are bytes: JSON carries them in base64 ("key", "name", "value") and,
// when they are valid UTF-8, also as text ("key_text", "name_text", "value_text"). The path's
// {key} is the key as text (percent-encoded as URLs need); ?key_b64= names any key in base64
// instead (with "_" as the path's key). prefix and after likewise take text, or base64 in
// prefix_b64 and after_b64. A scan's answer has "next", the after of the next page, unless it
// was the last.
//
// ?decode=NAME=TYPE (repeatable; NAME a path.Match pattern such as "seen" or "cards/*", TYPE
// one of i64, u64, f64, bool, string) decodes the values of the matching names with the SDKs'
// typed layout (a Counter or an i64 Value: 8 bytes little-endian; a Map's entries are named
// "<map>/<key>", a List's items "<list>/<index in hex>" and its length "<list>", a u64): each
// such value gets "decoded", the value as JSON, when its bytes have the type's layout. `wasmstream state --decode` takes the same rules.

// KeyState is a key's state in one stream of a task (a file input, a Kafka partition).
type KeyState struct {
	Stream string
	Key    []byte
	Values []NameValue
	// Host is the admin address of the host that answered for the stream, when the query was
	// forwarded to it ("" when the host asked answered).
	Host string
}

// NameValue is one state name and its value.
type NameValue struct{ Name, Value []byte }

// StateBackend is what the state endpoints need of the host; a Backend that also implements it
// serves them (404 otherwise).
type StateBackend interface {
	// State returns key's state in every stream of task that has some.
	State(r *http.Request, task string, key []byte) ([]KeyState, error)
	// ScanState returns up to limit keys with prefix after `after` (nil: from the first), with
	// their state, in the task's key order, and the names of the streams the page covers.
	ScanState(r *http.Request, task string, prefix, after []byte, limit int) ([]KeyState, []string, error)
}

// wireBytes is bytes as JSON carries them.
type wireBytes struct {
	B64  string
	Text *string
}

func wire(b []byte) wireBytes {
	w := wireBytes{B64: base64.StdEncoding.EncodeToString(b)}
	if utf8.Valid(b) {
		s := string(b)
		w.Text = &s
	}
	return w
}

type wireValue struct {
	Name      string  `json:"name"`
	NameText  *string `json:"name_text,omitempty"`
	Value     string  `json:"value"`
	ValueText *string `json:"value_text,omitempty"`
	// Decoded is the value decoded by a ?decode= rule.
	Decoded json.RawMessage `json:"decoded,omitempty"`
}

type wireKeyState struct {
	Stream  string      `json:"stream"`
	Host    string      `json:"host,omitempty"`
	Key     string      `json:"key"`
	KeyText *string     `json:"key_text,omitempty"`
	KeyNull bool        `json:"key_null,omitempty"` // the null key; key is its reserved bytes (abi.NullKey)
	Values  []wireValue `json:"values"`
}

func wireStates(ks []KeyState, dec statedecode.Decoder) []wireKeyState {
	out := make([]wireKeyState, 0, len(ks))
	for _, k := range ks {
		key := wire(k.Key)
		w := wireKeyState{Stream: k.Stream, Host: k.Host, Key: key.B64, KeyText: key.Text, KeyNull: abi.IsNullKey(k.Key), Values: []wireValue{}}
		for _, v := range k.Values {
			n, val := wire(v.Name), wire(v.Value)
			wv := wireValue{Name: n.B64, NameText: n.Text, Value: val.B64, ValueText: val.Text}
			if d, ok := dec.Decode(v.Name, v.Value); ok {
				b, err := json.Marshal(d)
				if err != nil { // a float JSON cannot hold (NaN, ±Inf)
					b, _ = json.Marshal(fmt.Sprint(d))
				}
				wv.Decoded = b
			}
			w.Values = append(w.Values, wv)
		}
		out = append(out, w)
	}
	return out
}

// bytesParam reads a query parameter given as text (name) or base64 (name_b64); nil when
// neither is given.
func bytesParam(r *http.Request, name string) ([]byte, error) {
	q := r.URL.Query()
	if b64, ok := q[name+"_b64"]; ok {
		b, err := base64.StdEncoding.DecodeString(b64[0])
		if err != nil {
			return nil, fmt.Errorf("%s_b64: not base64: %v", name, err)
		}
		return b, nil
	}
	if v, ok := q[name]; ok {
		return []byte(v[0]), nil
	}
	return nil, nil
}

func (s *Server) stateBackend(w http.ResponseWriter) StateBackend {
	sb, ok := s.cfg.Backend.(StateBackend)
	if !ok {
		writeError(w, http.StatusNotFound, errors.New("this host serves no state queries"), nil)
	}
	return sb
}

func (s *Server) state(w http.ResponseWriter, r *http.Request) {
	sb := s.stateBackend(w)
	if sb == nil {
		return
	}
	task := r.PathValue("task")
	key := []byte(r.PathValue("key"))
	if k, err := bytesParam(r, "key"); err != nil {
		writeError(w, http.StatusBadRequest, err, nil)
		return
	} else if k != nil {
		key = k
	}
	dec, err := statedecode.Parse("decode", r.URL.Query()["decode"])
	if err != nil {
		writeError(w, http.StatusBadRequest, err, nil)
		return
	}
	ks, err := sb.State(r, task, key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(ks) == 0 {
		writeError(w, http.StatusNotFound, fmt.Errorf("task %s: key %q has no state", task, key), nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"task": task, "states": wireStates(ks, dec)})
}

func (s *Server) scanState(w http.ResponseWriter, r *http.Request) {
	sb := s.stateBackend(w)
	if sb == nil {
		return
	}
	task := r.PathValue("task")
	prefix, err := bytesParam(r, "prefix")
	if err != nil {
		writeError(w, http.StatusBadRequest, err, nil)
		return
	}
	after, err := bytesParam(r, "after")
	if err != nil {
		writeError(w, http.StatusBadRequest, err, nil)
		return
	}
	dec, err := statedecode.Parse("decode", r.URL.Query()["decode"])
	if err != nil {
		writeError(w, http.StatusBadRequest, err, nil)
		return
	}
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit <= 0 || limit > 1000 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("limit %q: want a number from 1 to 1000", l), nil)
			return
		}
	}
	ks, streams, err := sb.ScanState(r, task, prefix, after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if streams == nil {
		streams = []string{}
	}
	body := map[string]any{"task": task, "states": wireStates(ks, dec), "streams": streams}
	keys := map[string]bool{}
	for _, k := range ks {
		keys[string(k.Key)] = true
	}
	if len(keys) == limit {
		next := wire(ks[len(ks)-1].Key)
		body["next"] = next.B64
		if next.Text != nil {
			body["next_text"] = *next.Text
		}
	}
	writeJSON(w, http.StatusOK, body)
}
