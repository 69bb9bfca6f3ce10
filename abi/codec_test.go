package abi

import (
	"bytes"
	"errors"
	"testing"
)

func TestMalformed(t *testing.T) {
	valid := goldenCases()["batch_two"]
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short header", valid[:6]},
		{"unknown kind", append(AppendU32(nil, 7), valid[4:]...)},
		{"count too big", append(AppendU32(AppendU32(nil, BatchRecords), 1<<30), valid[8:]...)},
		{"truncated record", valid[:len(valid)-1]},
		{"trailing byte", append(append([]byte{}, valid...), 0)},
		{"key length past end", func() []byte {
			b := AppendBatchHeader(nil, 1)
			b = AppendRecord(b, &Record{Key: []byte("k")})
			// The key length sits after flags, partition, offset, timestamp and the empty source.
			b[8+4+4+8+8+4] = 0xff
			return b
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeBatch(c.b)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("want ErrMalformed, got %v", err)
			}
		})
	}
	if _, err := DecodeInit(goldenCases()["init"][:10]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated init: %v", err)
	}
	if _, _, err := DecodeScanPage(AppendU32(AppendU32(nil, 0), 2), nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("scan page with more=2: %v", err)
	}
	if _, err := DecodeHeaders(AppendU32(nil, 1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("headers with missing entry: %v", err)
	}
}

func TestVersion(t *testing.T) {
	if !Compatible(Version) || !Compatible(0) || Compatible(1<<16) || Compatible(Version+1) {
		t.Fatal("Compatible is wrong")
	}
	if got := VersionString(0x0002_0003); got != "2.3" {
		t.Fatalf("VersionString = %q", got)
	}
	if ErrKeyNotInBatch.String() != "ERR_KEY_NOT_IN_BATCH" || Errno(-99).String() != "ERR_UNKNOWN(-99)" {
		t.Fatal("Errno names are wrong")
	}
}

func TestRecordSize(t *testing.T) {
	r := &Record{Source: []byte("s"), Key: []byte("key"), Value: []byte("value"),
		Headers: []Header{{Name: []byte("a"), Value: []byte("bc")}}}
	if got, want := RecordSize(r), len(AppendRecord(nil, r)); got != want {
		t.Fatalf("RecordSize = %d, encoded %d", got, want)
	}
}

// The decoders must never panic and must accept exactly what the encoders produce.
func FuzzDecodeBatch(f *testing.F) {
	for _, b := range goldenCases() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sameOnBothPaths(t, b)
		recs, err := DecodeBatch(b)
		if err != nil {
			return
		}
		again := AppendBatchHeader(nil, len(recs))
		for i := range recs {
			again = AppendRecord(again, &recs[i])
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("accepted input does not re-encode to itself:\n%x\n%x", b, again)
		}
	})
}

// sameOnBothPaths checks that BatchReader decodes b to the same records, byte fields equally nil
// or not, and ends with the same error, whether or not it takes the common case's path.
func sameOnBothPaths(t *testing.T, b []byte) {
	var fast, general BatchReader
	errF, errG := fast.Reset(b), general.Reset(b)
	if (errF == nil) != (errG == nil) {
		t.Fatalf("Reset: %v and %v", errF, errG)
	}
	if errF != nil {
		return
	}
	same := func(x, y []byte) bool { return bytes.Equal(x, y) && (x == nil) == (y == nil) && cap(x) == cap(y) }
	for i := 0; ; i++ {
		okF, okG := fast.Next(), general.nextGeneral()
		if okF != okG {
			t.Fatalf("record %d: decoded %v on the common path, %v on the general one", i, okF, okG)
		}
		if !okF {
			break
		}
		x, y := fast.Record(), general.Record()
		if x.Flags != y.Flags || x.Partition != y.Partition || x.Offset != y.Offset || x.Timestamp != y.Timestamp ||
			!same(x.Source, y.Source) || !same(x.Key, y.Key) || !same(x.Value, y.Value) || len(x.Headers) != len(y.Headers) {
			t.Fatalf("record %d differs:\n%+v\n%+v", i, *x, *y)
		}
		for k := range x.Headers {
			if !same(x.Headers[k].Name, y.Headers[k].Name) || !same(x.Headers[k].Value, y.Headers[k].Value) {
				t.Fatalf("record %d header %d differs: %+v, %+v", i, k, x.Headers[k], y.Headers[k])
			}
		}
	}
	if errF, errG := fast.Err(), general.Err(); errF != errG {
		t.Fatalf("errors differ: %v on the common path, %v on the general one", errF, errG)
	}
}

func FuzzDecodeInit(f *testing.F) {
	f.Add(goldenCases()["init"])
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeInit(b)
		if err == nil && !bytes.Equal(AppendInit(nil, in), b) {
			t.Fatal("round trip differs")
		}
	})
}

func FuzzDecodeHeaders(f *testing.F) {
	f.Add(goldenCases()["headers"])
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := DecodeHeaders(b)
		if err == nil && len(b) > 0 && !bytes.Equal(AppendHeaders(nil, hs), b) {
			t.Fatal("round trip differs")
		}
	})
}

func FuzzDecodeScanPage(f *testing.F) {
	f.Add(goldenCases()["scan_page"])
	f.Fuzz(func(t *testing.T, b []byte) {
		es, more, err := DecodeScanPage(b, nil)
		if err == nil && !bytes.Equal(AppendScanPage(nil, es, more), b) {
			t.Fatal("round trip differs")
		}
	})
}
