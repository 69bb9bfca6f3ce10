package admin

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// ownerBackend is the state side of an owner host: it records the forwarded request and
// answers with err, or with one key's state.
type ownerBackend struct {
	fakeBackend
	err  error
	seen *http.Request
}

func (b *ownerBackend) State(r *http.Request, task string, key []byte) ([]KeyState, error) {
	b.seen = r
	if b.err != nil {
		return nil, b.err
	}
	if string(key) == "none" {
		return nil, nil
	}
	return []KeyState{{Stream: "kafka:t/2", Key: key, Values: []NameValue{{Name: []byte("n"), Value: []byte{0xff, 1}}}}}, nil
}

func (b *ownerBackend) ScanState(r *http.Request, task string, prefix, after []byte, limit int) ([]KeyState, []string, error) {
	b.seen = r
	return []KeyState{{Stream: "kafka:t/2", Key: []byte("a")}}, []string{"kafka:t/2"}, b.err
}

// ForwardState and ForwardScan against a real admin server as the owner: what they send (the
// token given, the forwarding header, the partitions), the state read back byte for byte, and how
// the owner's refusals come back (503 for an owner that cannot answer now, whatever its reason;
// the token's 401 as it is).
func TestForwardState(t *testing.T) {
	b := &ownerBackend{}
	srv := New(Config{Token: "full", ReadToken: "reader", MaxModuleBytes: 1 << 20, Backend: b})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := ln.Addr().String()
	key := []byte("k/\x00é")

	ks, err := ForwardState(ctx, http.DefaultClient, addr, "Bearer reader", "10.0.0.1:7070", "wc", key, []string{"t/2", "u/0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 1 || !bytes.Equal(ks[0].Key, key) || ks[0].Stream != "kafka:t/2" || ks[0].Host != addr ||
		!bytes.Equal(ks[0].Values[0].Value, []byte{0xff, 1}) {
		t.Fatalf("ForwardState = %+v", ks)
	}
	if got := b.seen.Header.Get(ForwardedHeader); got != "10.0.0.1:7070" {
		t.Errorf("forwarded header %q", got)
	}
	if got := b.seen.URL.Query()["partition"]; !slices.Equal(got, []string{"t/2", "u/0"}) {
		t.Errorf("partitions %v", got)
	}
	if ks, err := ForwardState(ctx, http.DefaultClient, addr, "Bearer reader", "x", "wc", []byte("none"), nil); err != nil || ks != nil {
		t.Errorf("a key without state: %v, %v; want nothing, no error", ks, err)
	}
	ks, streams, err := ForwardScan(ctx, http.DefaultClient, addr, "Bearer reader", "x", "wc", []byte("p"), nil, 7)
	if err != nil || len(ks) != 1 || !slices.Equal(streams, []string{"kafka:t/2"}) || b.seen.URL.Query().Get("limit") != "7" {
		t.Errorf("ForwardScan = %+v %v %v (query %v)", ks, streams, err, b.seen.URL.Query())
	}

	status := func(err error) int {
		var ae *Error
		if !errors.As(err, &ae) {
			return 0
		}
		return ae.Status
	}
	for _, c := range []struct {
		auth  string
		err   error
		want  int
		words string
	}{
		{"Bearer wrong", nil, http.StatusUnauthorized, "wrong bearer token"},
		{"Bearer reader", &Error{Status: http.StatusServiceUnavailable, Err: errors.New("not owned here")}, http.StatusServiceUnavailable, "not owned here"},
		{"Bearer reader", &Error{Status: http.StatusConflict, Err: errors.New("task not running")}, http.StatusServiceUnavailable, "task not running"},
		{"Bearer reader", errors.New("disk on fire"), http.StatusServiceUnavailable, "disk on fire"},
		{"Bearer reader", &Error{Status: http.StatusNotFound, Err: errors.New("unknown task")}, http.StatusBadGateway, "unknown task"},
	} {
		b.err = c.err
		_, err := ForwardState(ctx, http.DefaultClient, addr, c.auth, "x", "wc", key, nil)
		if status(err) != c.want || !strings.Contains(err.Error(), c.words) || !strings.Contains(err.Error(), addr) {
			t.Errorf("owner answering %v (auth %q): %v (status %d), want %d naming the owner and %q", c.err, c.auth, err, status(err), c.want, c.words)
		}
	}
	cancel()
	<-done
	if _, err := ForwardState(context.Background(), http.DefaultClient, addr, "Bearer reader", "x", "wc", key, nil); status(err) != http.StatusServiceUnavailable {
		t.Errorf("an owner that is gone: %v, want 503", err)
	}
}

// A step of a group's reset reaches the backend with the forwarding host, the client's
// Authorization and the step as sent (ForwardReset); a client sending a step without the
// forwarded header gets 400. Probe tells an answering API from one nobody listens at.
func TestForwardReset(t *testing.T) {
	b := &fakeBackend{}
	addr, _, _ := serve(t, b, Limits{})
	var ans map[string]any
	err := ForwardReset(context.Background(), http.DefaultClient, addr, "Bearer "+token, "10.0.0.1:7070", "wc", "earliest",
		map[string]string{"phase": "stop", "id": "r1"}, &ans)
	if err != nil || ans["task"] != "wc" || ans["to"] != "earliest" {
		t.Fatalf("ForwardReset: %v %v", ans, err)
	}
	if got := b.lastReset; got.Forwarded != "10.0.0.1:7070" || got.Auth != "Bearer "+token || string(got.Group) != `{"id":"r1","phase":"stop"}` {
		t.Fatalf("the backend saw %+v", got)
	}
	err = ForwardReset(context.Background(), http.DefaultClient, addr, "Bearer wrong", "10.0.0.1:7070", "wc", "earliest", map[string]string{"phase": "stop"}, nil)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %v, want 401", err)
	}

	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/tasks/wc/reset", strings.NewReader(`{"to":"earliest","group":{"phase":"stop","id":"r1"}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a step without the forwarded header: %d, want 400", resp.StatusCode)
	}

	if err := Probe(context.Background(), http.DefaultClient, addr); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if err := Probe(context.Background(), http.DefaultClient, dead); !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("Probe of a closed port: %v, want 503", err)
	}
}
