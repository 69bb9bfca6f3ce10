// Package evtimetest is the input and the reference model of the event-time determinism tests
// (issue 23), shared by the host's tests and the end-to-end tests: the testguests/expire guest
// counts a key's records and re-arms an event-time timer at the record's time plus a gap with
// every record; the firing emits the count. Model computes what the guest must give for an input,
// independently of the host: for a deterministic guest, the outputs per key and the final state
// are a function of the input alone (ABI.md §4.12).
package evtimetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Rec is one input record: an "add" or "del" of Key at Ts.
type Rec struct {
	Key string
	Ts  int64
	Cmd string
}

// T0 is the event time the inputs start at.
const T0 = 1_800_000_000_000

// Gap and Lateness are the guest's default gap and the allowed lateness the tests configure.
const (
	Gap      = 30 * 60_000
	Lateness = 30_000
)

// Minimal is the minimal case: key A at t0; key B every minute from t0+1 min to
// t0+49 min; A at t0+50 min; B at t0+51 min. With a 30-minute gap and 30 s of allowed lateness,
// A's timer fires when B's t0+31 min record moves the watermark past t0+30 min: A emits 1, and
// 1 again at the end.
func Minimal() []Rec {
	recs := []Rec{{"A", T0, "add"}}
	for m := int64(1); m <= 49; m++ {
		recs = append(recs, Rec{"B", T0 + m*60_000, "add"})
	}
	return append(recs, Rec{"A", T0 + 50*60_000, "add"}, Rec{"B", T0 + 51*60_000, "add"})
}

// Generator makes records of sessions: 40 keys and a hot one, each active in bursts with pauses
// shorter and longer than the gap, event time advancing by 0–20 s per record; 3 % of the records
// are late (a few minutes behind the highest time so far), 2 % are deletes. Successive calls of
// Next continue the same input.
type Generator struct {
	rng   *rand.Rand
	ts    int64
	maxTs int64
	wake  map[string]int64 // a key is asleep until then
}

// NewGenerator returns a generator whose input is a function of seed.
func NewGenerator(seed uint64) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), ts: T0, maxTs: T0, wake: map[string]int64{}}
}

// Next returns the next n records.
func (g *Generator) Next(n int) []Rec {
	var recs []Rec
	for len(recs) < n {
		g.ts += g.rng.Int64N(20_000)
		var key string
		if g.rng.IntN(4) == 0 {
			key = "hot"
		} else {
			key = fmt.Sprintf("k%02d", g.rng.IntN(40))
		}
		if g.wake[key] > g.ts {
			continue
		}
		if g.rng.IntN(25) == 0 {
			g.wake[key] = g.ts + int64(5+g.rng.IntN(56))*60_000
		}
		r := Rec{key, g.ts, "add"}
		switch x := g.rng.IntN(100); {
		case x < 3:
			r.Ts = g.maxTs - int64(1+g.rng.IntN(5))*60_000
		case x < 5:
			r.Cmd = "del"
		}
		g.maxTs = max(g.maxTs, r.Ts)
		recs = append(recs, r)
	}
	return recs
}

// Model is the reference: one partition read in order, a watermark that is the highest
// timestamp read minus the lateness, never decreasing. A key's timer for T fires before the key's
// first record read once the watermark reached T (at the end of the input otherwise); a record is
// late when its timestamp is below the watermark as it was read. It returns each key's outputs in
// order ("<seq> ...", as the guest emits them) and the final state (key → name → value).
func Model(recs []Rec, gap, lateness int64) (outs map[string][]string, state map[string]map[string]string) {
	return ModelSegments([][]Rec{recs}, gap, lateness)
}

// ModelSegments is Model for a file that was read to its end after each segment (a run finished)
// before the next segment was appended: at each end every timer fires, and the watermark goes on
// from the records' times.
func ModelSegments(segs [][]Rec, gap, lateness int64) (outs map[string][]string, state map[string]map[string]string) {
	outs = map[string][]string{}
	type keyState struct {
		n, seq int64
		hasN   bool
		timer  int64 // -1: none
	}
	keys := map[string]*keyState{}
	emit := func(key string, k *keyState, what string) {
		k.seq++
		outs[key] = append(outs[key], fmt.Sprintf("%d %s", k.seq, what))
	}
	fire := func(key string, k *keyState) {
		emit(key, k, fmt.Sprintf("expire %d %d", k.n, k.timer))
		k.n, k.hasN, k.timer = 0, false, -1
	}
	wm := int64(-1)
	var order []string // keys in order of their first record
	off := -1
	for _, recs := range segs {
		for _, r := range recs {
			off++
			k := keys[r.Key]
			if k == nil {
				k = &keyState{timer: -1}
				keys[r.Key] = k
				order = append(order, r.Key)
			}
			if k.timer >= 0 && wm >= 0 && k.timer <= wm {
				fire(r.Key, k)
			}
			if wm >= 0 && r.Ts < wm {
				emit(r.Key, k, fmt.Sprintf("late %d", off))
			}
			wm = max(wm, r.Ts-lateness)
			switch r.Cmd {
			case "add":
				k.n++
				k.hasN = true
				k.timer = r.Ts + gap
			case "del":
				emit(r.Key, k, fmt.Sprintf("del %d", k.n))
				k.n, k.hasN, k.timer = 0, false, -1
			}
		}
		for _, key := range order {
			if k := keys[key]; k.timer >= 0 {
				fire(key, k) // the end of the input: every timer fires
			}
		}
	}
	state = map[string]map[string]string{}
	for key, k := range keys {
		st := map[string]string{}
		if k.hasN {
			st["n"] = strconv.FormatInt(k.n, 10)
		}
		if k.seq > 0 {
			st["seq"] = strconv.FormatInt(k.seq, 10)
		}
		if len(st) > 0 {
			state[key] = st
		}
	}
	return outs, state
}

// Lines is recs as NDJSON lines with the fields key, value and ts named as given.
func Lines(recs []Rec, keyField, valueField, tsField string) []byte {
	var b []byte
	for _, r := range recs {
		line, _ := json.Marshal(map[string]any{keyField: r.Key, tsField: r.Ts, valueField: r.Cmd})
		b = append(append(b, line...), '\n')
	}
	return b
}

// Diff describes how got differs from want, key by key (at most 10 keys); "" when equal.
func Diff(want, got map[string][]string) string {
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	n := 0
	for _, k := range keys {
		if slices.Equal(want[k], got[k]) {
			continue
		}
		if n++; n > 10 {
			b.WriteString("...\n")
			break
		}
		i := 0
		for i < len(want[k]) && i < len(got[k]) && want[k][i] == got[k][i] {
			i++
		}
		fmt.Fprintf(&b, "key %s: %d entries, want %d; first difference at %d: got %q, want %q\n",
			k, len(got[k]), len(want[k]), i, at(got[k], i), at(want[k], i))
	}
	return b.String()
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

// StateDiff is Diff for final states.
func StateDiff(want, got map[string]map[string]string) string {
	flat := func(m map[string]map[string]string) map[string][]string {
		f := map[string][]string{}
		for k, names := range m {
			for n, v := range names {
				f[k] = append(f[k], n+"="+v)
			}
			slices.Sort(f[k])
		}
		return f
	}
	return Diff(flat(want), flat(got))
}

// Dedupe turns outputs that may repeat after a crash (at least once) into each key's outputs
// once: the guest numbers a key's outputs, and a replay repeats an output with its number. It
// reports a number seen with two different outputs, or a gap in a key's numbers, as an error.
func Dedupe(outs map[string][]string) (map[string][]string, error) {
	res := map[string][]string{}
	for key, vs := range outs {
		bySeq := map[int]string{}
		top := 0
		for _, v := range vs {
			seqText, _, _ := strings.Cut(v, " ")
			seq, err := strconv.Atoi(seqText)
			if err != nil {
				return nil, fmt.Errorf("key %s: output %q has no number", key, v)
			}
			if prev, ok := bySeq[seq]; ok && prev != v {
				return nil, fmt.Errorf("key %s: output %d was %q, then %q after a restart", key, seq, prev, v)
			}
			bySeq[seq] = v
			top = max(top, seq)
		}
		for seq := 1; seq <= top; seq++ {
			v, ok := bySeq[seq]
			if !ok {
				return nil, fmt.Errorf("key %s: output %d of %d missing", key, seq, top)
			}
			res[key] = append(res[key], v)
		}
	}
	return res, nil
}
