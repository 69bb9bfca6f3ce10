package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// A state query for a key of a Kafka task is answered, in a group of hosts, by the hosts that
// own the key's partitions: the host asked forwards it to each owner (the host's backend finds
// them), with the client's own Authorization header, the header ForwardedHeader (its value the
// forwarding host's address) and one "partition" parameter ("topic/partition") per partition the
// owner is asked for. A forwarded query is answered from the partitions named, by the host that
// owns them now, or 503 when it does not: it is never forwarded again, so it cannot loop. A
// scan through a host is forwarded to every other owner of the task's partitions as the same
// page, answered from the partitions the owner holds (ForwardScan); the host merges the pages.

// ForwardedHeader marks a forwarded state query.
const ForwardedHeader = "X-Wasmstream-Forwarded"

// maxForwardedBody bounds an owner's answer (a key's state or a page of a scan).
const maxForwardedBody = 64 << 20

// ForwardState asks the admin API at addr for key's state in the partitions named
// ("topic/partition"), presenting auth as the Authorization header and from as the forwarding
// host. A key without state there is no error (nil). An owner's refusal comes back as an *Error:
// 401 or 403 for the token as the owner answered; 503 when the owner cannot answer now (it does
// not own the partitions any more or yet, its task is stopping, it cannot be reached: a host
// leaving is still the owner until the group moves its partitions); a 502 for anything else.
func ForwardState(ctx context.Context, client *http.Client, addr, auth, from, task string, key []byte, parts []string) ([]KeyState, error) {
	q := url.Values{"key_b64": {base64.StdEncoding.EncodeToString(key)}, "partition": parts}
	ans, err := forward(ctx, client, addr, auth, from, "/v1/tasks/"+url.PathEscape(task)+"/state/_", q, true)
	if err != nil {
		return nil, err
	}
	return ans.states(addr)
}

// ForwardScan asks the admin API at addr for a page of a scan (as ScanState's arguments) of the
// streams that host owns, as ForwardState does; it returns the page and the streams it covers.
func ForwardScan(ctx context.Context, client *http.Client, addr, auth, from, task string, prefix, after []byte, limit int) ([]KeyState, []string, error) {
	q := url.Values{"prefix_b64": {base64.StdEncoding.EncodeToString(prefix)}, "limit": {strconv.Itoa(limit)}}
	if after != nil {
		q.Set("after_b64", base64.StdEncoding.EncodeToString(after))
	}
	ans, err := forward(ctx, client, addr, auth, from, "/v1/tasks/"+url.PathEscape(task)+"/state", q, false)
	if err != nil {
		return nil, nil, err
	}
	ks, err := ans.states(addr)
	return ks, ans.Streams, err
}

// forwardedAnswer is an owner's answer.
type forwardedAnswer struct {
	Error   string         `json:"error"`
	States  []wireKeyState `json:"states"`
	Streams []string       `json:"streams"`
}

func (a forwardedAnswer) states(addr string) ([]KeyState, error) {
	var out []KeyState
	for _, w := range a.States {
		ks, err := w.decode()
		if err != nil {
			return nil, &Error{Status: http.StatusBadGateway, Err: fmt.Errorf("the owner at %s: %v", addr, err)}
		}
		if ks.Host == "" {
			ks.Host = addr
		}
		out = append(out, ks)
	}
	return out, nil
}

// forward sends a forwarded GET to addr; a key's "has no state" 404 is an empty answer when
// noState404.
func forward(ctx context.Context, client *http.Client, addr, auth, from, path string, q url.Values, noState404 bool) (forwardedAnswer, error) {
	var ans forwardedAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path+"?"+q.Encode(), nil)
	if err != nil {
		return ans, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set(ForwardedHeader, from)
	resp, err := client.Do(req)
	if err != nil {
		return ans, &Error{Status: http.StatusServiceUnavailable, Err: fmt.Errorf("the owner at %s cannot be reached: %w", addr, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedBody))
	if err != nil {
		return ans, &Error{Status: http.StatusServiceUnavailable, Err: fmt.Errorf("reading the answer of the owner at %s: %w", addr, err)}
	}
	jerr := json.Unmarshal(body, &ans)
	switch {
	case noState404 && resp.StatusCode == http.StatusNotFound && jerr == nil && ans.States == nil && isNoState(ans.Error):
		return forwardedAnswer{}, nil
	case resp.StatusCode != http.StatusOK:
		msg := ans.Error
		if jerr != nil || msg == "" {
			msg = resp.Status
		}
		status := resp.StatusCode
		switch status {
		case http.StatusUnauthorized, http.StatusForbidden:
		case http.StatusServiceUnavailable, http.StatusConflict, http.StatusInternalServerError, http.StatusBadGateway:
			status = http.StatusServiceUnavailable
		default:
			status = http.StatusBadGateway
		}
		return ans, &Error{Status: status, Err: fmt.Errorf("the owner at %s: %s", addr, msg)}
	case jerr != nil:
		return ans, &Error{Status: http.StatusBadGateway, Err: fmt.Errorf("the owner at %s answered no JSON: %v", addr, jerr)}
	}
	return ans, nil
}

// ForwardReset posts body, a step of a group's reset of task (ResetRequest.Group) with target
// to, to the admin API at addr, presenting auth and from as ForwardState does, and decodes the
// answer into out. A host that cannot be reached is an *Error with 503; a refusal carries the
// other host's status and message.
func ForwardReset(ctx context.Context, client *http.Client, addr, auth, from, task, to string, body, out any) error {
	step, err := json.Marshal(body)
	if err != nil {
		return err
	}
	payload, err := json.Marshal(map[string]any{"to": to, "group": json.RawMessage(step)})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/tasks/"+url.PathEscape(task)+"/reset", bytes.NewReader(payload))
	if err != nil {
		return err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set(ForwardedHeader, from)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return &Error{Status: http.StatusServiceUnavailable, Err: fmt.Errorf("the host at %s cannot be reached: %w", addr, err)}
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedBody))
	if err != nil {
		return &Error{Status: http.StatusServiceUnavailable, Err: fmt.Errorf("reading the answer of the host at %s: %w", addr, err)}
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		msg := resp.Status
		if json.Unmarshal(ans, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &Error{Status: resp.StatusCode, Err: fmt.Errorf("the host at %s: %s", addr, msg)}
	}
	if out != nil {
		if err := json.Unmarshal(ans, out); err != nil {
			return &Error{Status: http.StatusBadGateway, Err: fmt.Errorf("the host at %s answered no JSON: %v", addr, err)}
		}
	}
	return nil
}

// Probe asks the admin API at addr whether it is up (GET /healthz, which needs no token): an
// *Error with 503 when it cannot be reached or does not answer 200.
func Probe(ctx context.Context, client *http.Client, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return &Error{Status: http.StatusServiceUnavailable, Err: fmt.Errorf("the host at %s cannot be reached: %w", addr, err)}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &Error{Status: http.StatusServiceUnavailable, Err: fmt.Errorf("the host at %s: /healthz answered %s", addr, resp.Status)}
	}
	return nil
}

// isNoState reports whether a 404's message is the state endpoint's "has no state" (rather
// than an unknown task or path).
func isNoState(msg string) bool {
	const suffix = "has no state"
	return len(msg) >= len(suffix) && msg[len(msg)-len(suffix):] == suffix
}

func (w wireKeyState) decode() (KeyState, error) {
	var err error
	b64 := func(s string) []byte {
		b, e := base64.StdEncoding.DecodeString(s)
		if e != nil && err == nil {
			err = errors.New("bad base64 in a state: " + strconv.Quote(s))
		}
		return b
	}
	ks := KeyState{Stream: w.Stream, Host: w.Host, Key: b64(w.Key)}
	for _, v := range w.Values {
		ks.Values = append(ks.Values, NameValue{Name: b64(v.Name), Value: b64(v.Value)})
	}
	return ks, err
}
