package abi

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the encoder")

// goldenCases are the values described in testdata/golden/README.md. Every SDK builds the same
// values and must produce the same bytes.
func goldenCases() map[string][]byte {
	return map[string][]byte{
		"init":        AppendInit(nil, Init{Version: 1, Task: []byte("wordcount"), Config: []byte(`{"min_len":2}`)}),
		"batch_empty": AppendBatchHeader(nil, 0),
		"batch_two": func() []byte {
			b := AppendBatchHeader(nil, 2)
			b = AppendRecord(b, &Record{Partition: 0, Offset: 0, Timestamp: 1700000000000,
				Source: []byte("input"), Key: []byte("alice"), Value: []byte("hello world")})
			b = AppendRecord(b, &Record{Flags: FlagLate, Partition: 3, Offset: 42, Timestamp: -1,
				Source: []byte("orders"), Key: []byte{}, Value: []byte{0x00, 0xff},
				Headers: []Header{{Name: []byte("trace"), Value: []byte("abc")}, {Name: []byte("empty"), Value: []byte{}}}})
			return b
		}(),
		"headers": AppendHeaders(nil, []Header{
			{Name: []byte("content-type"), Value: []byte("text/plain")}, {Name: []byte("x"), Value: []byte{}}}),
		"headers_empty":   AppendHeaders(nil, nil),
		"scan_page":       AppendScanPage(nil, []ScanEntry{{Name: []byte("a"), Value: []byte("1")}, {Name: []byte("b"), Value: []byte{}}}, true),
		"scan_page_empty": AppendScanPage(nil, nil, false),
		"firings": func() []byte {
			b := AppendFiringsHeader(nil, 2)
			b = AppendFiring(b, &Firing{Partition: 0, Time: 1700000000000,
				Key: []byte("alice"), Name: []byte("flush"), Payload: []byte{}})
			return AppendFiring(b, &Firing{Flags: FiringEventTime, Partition: 3, Time: 1700000060000,
				Key: []byte{}, Name: []byte("window/60"), Payload: []byte{0x00, 0xff}})
		}(),
		"tick":     AppendTick(nil, &Tick{Partition: 3, Now: 1700000000000, Watermark: -1, Source: []byte("orders")}),
		"migrate":  AppendMigrate(nil, &Migrate{From: 1, To: 2, Partition: 3, Key: []byte("alice")}),
		"key_page": AppendKeyPage(nil, [][]byte{[]byte(""), []byte("alice"), []byte("bob")}, true),
		"http_request": AppendHTTPRequest(nil, &HTTPRequest{Method: []byte("POST"),
			URL:     []byte("https://api.example.com/v1/score?id=1"),
			Headers: []Header{{Name: []byte("content-type"), Value: []byte("application/json")}, {Name: []byte("x-empty"), Value: []byte{}}},
			Body:    []byte(`{"user":"alice"}`), TimeoutMs: 2500}),
		"http_response": AppendHTTPResponse(nil, &HTTPResponse{Status: 404,
			Headers: []Header{{Name: []byte("content-type"), Value: []byte("text/plain")}},
			Body:    []byte("not found")}),
	}
}

// ReadGoldenHex parses the .hex format: hex byte pairs separated by white space; '#' starts a
// comment that runs to the end of the line.
func readGoldenHex(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

func writeGoldenHex(t *testing.T, path, name string, b []byte) {
	t.Helper()
	var s strings.Builder
	s.WriteString("# golden vector " + name + " (see README.md); regenerate with: go test -run TestGolden -update\n")
	for i := 0; i < len(b); i += 16 {
		end := min(i+16, len(b))
		parts := make([]string, 0, 16)
		for _, c := range b[i:end] {
			parts = append(parts, hex.EncodeToString([]byte{c}))
		}
		s.WriteString(strings.Join(parts, " ") + "\n")
	}
	if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGolden(t *testing.T) {
	for name, want := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", name+".hex")
			if *update {
				writeGoldenHex(t, path, name, want)
			}
			got := readGoldenHex(t, path)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoder and golden file differ\nencoder: %x\ngolden:  %x", want, got)
			}
			// Every golden vector decodes and re-encodes to itself.
			var again []byte
			switch {
			case name == "init":
				in, err := DecodeInit(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendInit(nil, in)
			case strings.HasPrefix(name, "batch"):
				recs, err := DecodeBatch(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendBatchHeader(nil, len(recs))
				for i := range recs {
					again = AppendRecord(again, &recs[i])
				}
			case strings.HasPrefix(name, "headers"):
				hs, err := DecodeHeaders(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendHeaders(nil, hs)
			case strings.HasPrefix(name, "scan_page"):
				es, more, err := DecodeScanPage(got, nil)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendScanPage(nil, es, more)
			case name == "firings":
				fs, err := DecodeFirings(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendFiringsHeader(nil, len(fs))
				for i := range fs {
					again = AppendFiring(again, &fs[i])
				}
			case name == "tick":
				tk, err := DecodeTick(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendTick(nil, &tk)
			case name == "migrate":
				m, err := DecodeMigrate(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendMigrate(nil, &m)
			case name == "key_page":
				keys, more, err := DecodeKeyPage(got, nil)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendKeyPage(nil, keys, more)
			case name == "http_request":
				r, err := DecodeHTTPRequest(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendHTTPRequest(nil, &r)
			case name == "http_response":
				r, err := DecodeHTTPResponse(got)
				if err != nil {
					t.Fatal(err)
				}
				again = AppendHTTPResponse(nil, &r)
			default:
				t.Fatalf("no decoder for %s", name)
			}
			if !bytes.Equal(again, got) {
				t.Fatalf("round trip differs\nwant %x\ngot  %x", got, again)
			}
		})
	}
}

func TestGoldenBatchFields(t *testing.T) {
	recs, err := DecodeBatch(readGoldenHex(t, filepath.Join("testdata", "golden", "batch_two.hex")))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d records", len(recs))
	}
	r := recs[1]
	if r.Flags != FlagLate || r.Partition != 3 || r.Offset != 42 || r.Timestamp != -1 ||
		string(r.Source) != "orders" || len(r.Key) != 0 || !bytes.Equal(r.Value, []byte{0, 0xff}) ||
		len(r.Headers) != 2 || string(r.Headers[0].Name) != "trace" || string(r.Headers[0].Value) != "abc" {
		t.Fatalf("decoded %+v", r)
	}
	if recs[0].Timestamp != 1700000000000 || string(recs[0].Key) != "alice" {
		t.Fatalf("decoded %+v", recs[0])
	}
}

// The 0.2 vectors decode to the values the README lists.
func TestGolden02Fields(t *testing.T) {
	read := func(name string) []byte { return readGoldenHex(t, filepath.Join("testdata", "golden", name+".hex")) }
	fs, err := DecodeFirings(read("firings"))
	if err != nil || len(fs) != 2 {
		t.Fatalf("firings: %d, %v", len(fs), err)
	}
	if f := fs[0]; f.Flags != 0 || f.Partition != 0 || f.Time != 1700000000000 || string(f.Key) != "alice" ||
		string(f.Name) != "flush" || len(f.Payload) != 0 {
		t.Fatalf("firing 0: %+v", f)
	}
	if f := fs[1]; f.Flags != FiringEventTime || f.Partition != 3 || f.Time != 1700000060000 || len(f.Key) != 0 ||
		string(f.Name) != "window/60" || !bytes.Equal(f.Payload, []byte{0, 0xff}) {
		t.Fatalf("firing 1: %+v", f)
	}
	if tk, err := DecodeTick(read("tick")); err != nil || tk.Partition != 3 || tk.Now != 1700000000000 ||
		tk.Watermark != -1 || string(tk.Source) != "orders" {
		t.Fatalf("tick: %+v, %v", tk, err)
	}
	if m, err := DecodeMigrate(read("migrate")); err != nil || m.From != 1 || m.To != 2 || m.Partition != 3 ||
		string(m.Key) != "alice" {
		t.Fatalf("migrate: %+v, %v", m, err)
	}
	keys, more, err := DecodeKeyPage(read("key_page"), nil)
	if err != nil || !more || len(keys) != 3 || len(keys[0]) != 0 || string(keys[1]) != "alice" || string(keys[2]) != "bob" {
		t.Fatalf("key page: %q, %v, %v", keys, more, err)
	}
	req, err := DecodeHTTPRequest(read("http_request"))
	if err != nil || string(req.Method) != "POST" || string(req.URL) != "https://api.example.com/v1/score?id=1" ||
		len(req.Headers) != 2 || string(req.Headers[0].Name) != "content-type" ||
		string(req.Headers[0].Value) != "application/json" || string(req.Headers[1].Name) != "x-empty" ||
		len(req.Headers[1].Value) != 0 || string(req.Body) != `{"user":"alice"}` || req.TimeoutMs != 2500 {
		t.Fatalf("http request: %+v, %v", req, err)
	}
	resp, err := DecodeHTTPResponse(read("http_response"))
	if err != nil || resp.Status != 404 || len(resp.Headers) != 1 || string(resp.Headers[0].Name) != "content-type" ||
		string(resp.Headers[0].Value) != "text/plain" || string(resp.Body) != "not found" {
		t.Fatalf("http response: %+v, %v", resp, err)
	}
}
