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
