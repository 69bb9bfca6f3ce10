package modrt

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// documentedErrors reads ABI.md §4 and returns, per host function id, the error codes its section
// names, following "Errors as 4.N" to the section it points at. The fuzzers check every negative
// result against it, so a code the host returns and the ABI does not document fails them, and a
// code documented later needs no second list to be kept in step (CI once failed on a table that
// had missed state_get's ERR_TOO_LARGE, documented a round earlier).
var documentedErrors = sync.OnceValues(func() ([hfCount][]abi.Errno, error) {
	var out [hfCount][]abi.Errno
	b, err := os.ReadFile("../../../abi/ABI.md")
	if err != nil {
		return out, err
	}
	head := regexp.MustCompile("^### (4\\.\\d+) `([a-z_0-9]+)\\(")
	codes := regexp.MustCompile(`ERR_[A-Z_]+`)
	see := regexp.MustCompile(`Errors as (4\.\d+)`)
	bodies := map[string]string{} // "4.1" → section text
	names := map[string]string{}  // function name → "4.1"
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			cur = ""
			if m := head.FindStringSubmatch(line); m != nil {
				cur, names[m[2]] = m[1], m[1]
			}
			continue
		}
		if cur != "" {
			bodies[cur] += line + "\n"
		}
	}
	byName := map[string]abi.Errno{}
	for e := abi.ErrNotFound; e >= abi.ErrUnavailable; e-- {
		byName[e.String()] = e
	}
	for id := range hfCount {
		sec, ok := names[hostFuncs[id].name]
		if !ok {
			continue
		}
		text := bodies[sec]
		for _, m := range see.FindAllStringSubmatch(text, -1) {
			text += bodies[m[1]]
		}
		seen := map[abi.Errno]bool{}
		for _, c := range codes.FindAllString(text, -1) {
			if e, ok := byName[c]; ok && !seen[e] {
				seen[e] = true
				out[id] = append(out[id], e)
			}
		}
	}
	return out, nil
})

// allowedErrors is documentedErrors for a fuzzer, failing it when ABI.md cannot be read.
func allowedErrors(tb testing.TB) [hfCount][]abi.Errno {
	tb.Helper()
	d, err := documentedErrors()
	if err != nil {
		tb.Fatalf("reading ABI.md: %v", err)
	}
	return d
}

// TestDocumentedErrors checks the reading of ABI.md itself: every host function that returns a
// status has codes, the references are followed, and a code is not invented.
func TestDocumentedErrors(t *testing.T) {
	d := allowedErrors(t)
	has := func(id int, e abi.Errno) bool {
		for _, x := range d[id] {
			if x == e {
				return true
			}
		}
		return false
	}
	for id := range hfCount {
		switch id {
		case hfNowMs, hfWatermarkMs: // return a time, never a status
			continue
		}
		if len(d[id]) == 0 {
			t.Errorf("%s: no error codes found in ABI.md §4", hostFuncs[id].name)
		}
	}
	for _, c := range []struct {
		id   int
		e    abi.Errno
		want bool
	}{
		{hfStateGet, abi.ErrTooLarge, true},
		{hfStateDelete, abi.ErrLimit, true},        // "Errors as 4.2"
		{hfStateScan, abi.ErrKeyNotInBatch, true},  // "Errors as 4.1 plus ..."
		{hfStateScan, abi.ErrBufferTooSmall, true}, // its own
		{hfTimerDelete, abi.ErrInvalid, true},      // "Errors as 4.10"
		{hfConfigGet, abi.ErrNotFound, false},
		{hfFail, abi.ErrInternal, false},
		{hfLog, abi.ErrTooLarge, false},
	} {
		if got := has(c.id, c.e); got != c.want {
			t.Errorf("%s documents %v: %v, want %v (read %v)", hostFuncs[c.id].name, c.e, got, c.want, d[c.id])
		}
	}
}
