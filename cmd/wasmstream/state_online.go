package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/wasmstream/wasmstream/host"
)

// `wasmstream state --admin-addr`: the state of a running host, through its admin API's state
// endpoints, printed as the offline reader prints it.

// wireStates is the answer of GET /v1/tasks/{task}/state[/{key}].
type wireStates struct {
	States []struct {
		Stream string `json:"stream"`
		Key    string `json:"key"`
		Values []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"values"`
	} `json:"states"`
	Next string `json:"next"`
}

// entries turns an answer into the offline reader's entries.
func (ws wireStates) entries() ([]host.StateEntry, error) {
	var out []host.StateEntry
	dec := base64.StdEncoding.DecodeString
	for _, s := range ws.States {
		key, err := dec(s.Key)
		if err != nil {
			return nil, fmt.Errorf("admin API: key %q: %v", s.Key, err)
		}
		for _, v := range s.Values {
			name, err1 := dec(v.Name)
			val, err2 := dec(v.Value)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("admin API: a name or value of key %q is not base64", key)
			}
			out = append(out, host.StateEntry{Stream: s.Stream, Key: key, Name: name, Value: val})
		}
	}
	return out, nil
}

// printStateOnline prints what printState prints, from a running host.
func printStateOnline(ctx context.Context, stdout io.Writer, c *adminClient, task string, match []byte, exact bool, format string, dec stateDecoder) error {
	w := bufio.NewWriter(stdout)
	if task == "" {
		var st wireStatus
		if err := c.do(ctx, "GET", "/v1/status", nil, 0, &st); err != nil {
			return err
		}
		for _, t := range st.Tasks {
			fmt.Fprintln(w, t.Task)
		}
		return flush(w)
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	print := func(ws wireStates) error {
		es, err := ws.entries()
		if err != nil {
			return failure(err)
		}
		for _, e := range es {
			if err = writeStateEntry(w, enc, e, format, dec); err != nil {
				return failure(err)
			}
		}
		return nil
	}
	base := "/v1/tasks/" + url.PathEscape(task) + "/state"
	b64 := func(b []byte) string { return url.QueryEscape(base64.StdEncoding.EncodeToString(b)) }
	if exact {
		var ws wireStates
		err := c.do(ctx, "GET", base+"/_?key_b64="+b64(match), nil, 0, &ws)
		if err != nil && strings.Contains(err.Error(), "(HTTP 404)") && strings.Contains(err.Error(), "has no state") {
			return flush(w) // as offline: a key without state prints nothing
		}
		if err != nil {
			return err
		}
		if err := print(ws); err != nil {
			return err
		}
		return flush(w)
	}
	after := ""
	for {
		path := base + "?limit=1000&prefix_b64=" + b64(match)
		if after != "" {
			path += "&after_b64=" + url.QueryEscape(after)
		}
		var ws wireStates
		if err := c.do(ctx, "GET", path, nil, 0, &ws); err != nil {
			return err
		}
		if err := print(ws); err != nil {
			return err
		}
		if ws.Next == "" {
			return flush(w)
		}
		after = ws.Next
	}
}
