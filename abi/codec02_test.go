package abi

import (
	"bytes"
	"errors"
	"testing"
)

func TestMalformed02(t *testing.T) {
	g := goldenCases()
	trailing := func(b []byte) []byte { return append(append([]byte{}, b...), 0) }
	withKind := func(b []byte, kind uint32) []byte { return append(AppendU32(nil, kind), b[4:]...) }
	decoders := map[string]func([]byte) error{
		"firings":       func(b []byte) error { _, err := DecodeFirings(b); return err },
		"tick":          func(b []byte) error { _, err := DecodeTick(b); return err },
		"migrate":       func(b []byte) error { _, err := DecodeMigrate(b); return err },
		"key_page":      func(b []byte) error { _, _, err := DecodeKeyPage(b, nil); return err },
		"http_request":  func(b []byte) error { _, err := DecodeHTTPRequest(b); return err },
		"http_response": func(b []byte) error { _, err := DecodeHTTPResponse(b); return err },
	}
	cases := []struct {
		name, layout string
		b            []byte
	}{
		{"firings empty", "firings", nil},
		{"firings wrong kind", "firings", withKind(g["firings"], BatchRecords)},
		{"firings count too big", "firings", append(AppendFiringsHeader(nil, 1<<30), g["firings"][8:]...)},
		{"firings truncated", "firings", g["firings"][:len(g["firings"])-1]},
		{"firings trailing byte", "firings", trailing(g["firings"])},
		{"firings key past end", "firings", func() []byte {
			b := AppendFiring(AppendFiringsHeader(nil, 1), &Firing{Key: []byte("k")})
			b[8+4+4+8] = 0xff // the key length
			return b
		}()},
		{"tick empty", "tick", nil},
		{"tick wrong kind", "tick", withKind(g["tick"], BatchMigrate)},
		{"tick truncated", "tick", g["tick"][:len(g["tick"])-1]},
		{"tick trailing byte", "tick", trailing(g["tick"])},
		{"migrate wrong kind", "migrate", withKind(g["migrate"], BatchTick)},
		{"migrate truncated", "migrate", g["migrate"][:10]},
		{"migrate trailing byte", "migrate", trailing(g["migrate"])},
		{"key page more = 2", "key_page", AppendU32(AppendU32(nil, 0), 2)},
		{"key page count too big", "key_page", AppendU32(AppendU32(nil, 3), 0)},
		{"key page truncated", "key_page", g["key_page"][:len(g["key_page"])-1]},
		{"key page trailing byte", "key_page", trailing(g["key_page"])},
		{"http request truncated", "http_request", g["http_request"][:len(g["http_request"])-1]},
		{"http request trailing byte", "http_request", trailing(g["http_request"])},
		{"http request header count too big", "http_request", func() []byte {
			b := AppendHTTPRequest(nil, &HTTPRequest{})
			b[8] = 0xff // the header count, after the empty method and URL
			return b
		}()},
		{"http response empty", "http_response", nil},
		{"http response truncated", "http_response", g["http_response"][:len(g["http_response"])-1]},
		{"http response trailing byte", "http_response", trailing(g["http_response"])},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := decoders[c.layout](c.b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("want ErrMalformed, got %v", err)
			}
		})
	}
}

func TestSizes02(t *testing.T) {
	f := &Firing{Key: []byte("k"), Name: []byte("name"), Payload: []byte("pp")}
	tk := &Tick{Source: []byte("src")}
	m := &Migrate{Key: []byte("key")}
	hs := []Header{{Name: []byte("a"), Value: []byte("bc")}}
	req := &HTTPRequest{Method: []byte("GET"), URL: []byte("http://x/"), Headers: hs, Body: []byte("b")}
	resp := &HTTPResponse{Status: 200, Headers: hs, Body: []byte("body")}
	for _, c := range []struct {
		name      string
		size, got int
	}{
		{"firing", FiringSize(f), len(AppendFiring(nil, f))},
		{"tick", TickSize(tk), len(AppendTick(nil, tk))},
		{"migrate", MigrateSize(m), len(AppendMigrate(nil, m))},
		{"key page entry", KeyPageEntrySize([]byte("abc")), len(AppendKeyPage(nil, [][]byte{[]byte("abc")}, false)) - 8},
		{"http request", HTTPRequestSize(req), len(AppendHTTPRequest(nil, req))},
		{"http response", HTTPResponseSize(resp), len(AppendHTTPResponse(nil, resp))},
	} {
		if c.size != c.got {
			t.Errorf("%s: size %d, encoded %d", c.name, c.size, c.got)
		}
	}
}

// A FiringsReader is reusable and its views point into the payload.
func TestFiringsReaderReset(t *testing.T) {
	var r FiringsReader
	for i := 0; i < 2; i++ {
		b := goldenCases()["firings"]
		if err := r.Reset(b); err != nil || r.Len() != 2 {
			t.Fatalf("Reset: %v, Len %d", err, r.Len())
		}
		var names []string
		for r.Next() {
			names = append(names, string(r.Firing().Name))
		}
		if r.Err() != nil || len(names) != 2 || names[0] != "flush" || names[1] != "window/60" {
			t.Fatalf("names %q, err %v", names, r.Err())
		}
	}
	if err := r.Reset(goldenCases()["tick"]); !errors.Is(err, ErrMalformed) || r.Next() {
		t.Fatalf("a tick is not a Firings payload: %v", err)
	}
}

func FuzzDecodeFirings(f *testing.F) {
	f.Add(goldenCases()["firings"])
	f.Fuzz(func(t *testing.T, b []byte) {
		fs, err := DecodeFirings(b)
		if err != nil {
			return
		}
		again := AppendFiringsHeader(nil, len(fs))
		for i := range fs {
			again = AppendFiring(again, &fs[i])
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("round trip differs:\n%x\n%x", b, again)
		}
	})
}

func FuzzDecodeTick(f *testing.F) {
	f.Add(goldenCases()["tick"])
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := DecodeTick(b)
		if err == nil && !bytes.Equal(AppendTick(nil, &tk), b) {
			t.Fatal("round trip differs")
		}
	})
}

func FuzzDecodeMigrate(f *testing.F) {
	f.Add(goldenCases()["migrate"])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMigrate(b)
		if err == nil && !bytes.Equal(AppendMigrate(nil, &m), b) {
			t.Fatal("round trip differs")
		}
	})
}

func FuzzDecodeKeyPage(f *testing.F) {
	f.Add(goldenCases()["key_page"])
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, more, err := DecodeKeyPage(b, nil)
		if err == nil && !bytes.Equal(AppendKeyPage(nil, keys, more), b) {
			t.Fatal("round trip differs")
		}
	})
}

func FuzzDecodeHTTPRequest(f *testing.F) {
	f.Add(goldenCases()["http_request"])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeHTTPRequest(b)
		if err == nil && !bytes.Equal(AppendHTTPRequest(nil, &r), b) {
			t.Fatal("round trip differs")
		}
	})
}

func FuzzDecodeHTTPResponse(f *testing.F) {
	f.Add(goldenCases()["http_response"])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeHTTPResponse(b)
		if err == nil && !bytes.Equal(AppendHTTPResponse(nil, &r), b) {
			t.Fatal("round trip differs")
		}
	})
}
