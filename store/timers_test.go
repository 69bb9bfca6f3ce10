package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// setTimer and delTimer build TimerOps.
func setTimer(name string, domain uint8, due int64, payload string) TimerOp {
	return TimerOp{Name: []byte(name), Domain: domain, Due: due, Payload: []byte(payload)}
}
func delTimer(name string) TimerOp { return TimerOp{Name: []byte(name), Delete: true} }

// timerString describes a timer for comparisons.
func timerString(t Timer) string {
	return fmt.Sprintf("%s/%s@%d:%d=%s", t.Key, t.Name, t.Domain, t.Due, t.Payload)
}

// dueTimers returns every timer DueTimers passes to fn, as timerStrings, and
// its next result ("-" for none).
func dueTimers(t *testing.T, db *DB, s uint32, domain uint8, upTo int64, after *TimerRef, limit int) (got []string, next string) {
	t.Helper()
	n, ok, err := db.DueTimers("t", s, domain, upTo, after, limit, func(tm Timer) bool {
		got = append(got, timerString(tm))
		return true
	})
	if err != nil {
		t.Fatalf("DueTimers: %v", err)
	}
	next = "-"
	if ok {
		next = fmt.Sprint(n)
	}
	return got, next
}

// timerOf returns the timer as a timerString, or "<none>".
func timerOf(t *testing.T, db *DB, s uint32, key, name string) string {
	t.Helper()
	tm, ok, err := db.Timer("t", s, []byte(key), []byte(name))
	if err != nil {
		t.Fatalf("Timer(%q, %q): %v", key, name, err)
	}
	if !ok {
		return "<none>"
	}
	if string(tm.Key) != key || string(tm.Name) != name || tm.Payload == nil {
		t.Errorf("Timer(%q, %q) = %+v: wrong key or name, or nil payload", key, name, tm)
	}
	return timerString(tm)
}

func TestTimerKeysGolden(t *testing.T) {
	got := appendTimerKey(nil, "wc", 1, []byte("ab"), []byte("n"))
	want, _ := hex.DecodeString("54" + "0002" + "7763" + "00000001" + "00000002" + "6162" + "6e")
	if !bytes.Equal(got, want) {
		t.Errorf("timer key = %x, want %x", got, want)
	}
	got = appendDueKey(nil, "wc", 1, 1, -2, []byte("ab"), []byte("n"))
	want, _ = hex.DecodeString("44" + "0002" + "7763" + "00000001" + "01" + "7ffffffffffffffe" + "00000002" + "6162" + "6e")
	if !bytes.Equal(got, want) {
		t.Errorf("due key = %x, want %x", got, want)
	}
	got = appendTimerValue(nil, 1, 258, []byte("p"))
	want, _ = hex.DecodeString("01" + "0000000000000102" + "70")
	if !bytes.Equal(got, want) {
		t.Errorf("timer value = %x, want %x", got, want)
	}
	// Due times sort as signed numbers.
	dues := []int64{math.MinInt64, -1 << 40, -1, 0, 1, 1 << 40, math.MaxInt64}
	for i := 1; i < len(dues); i++ {
		a := appendDueKey(nil, "t", 1, 0, dues[i-1], []byte("zzzz"), []byte("z"))
		b := appendDueKey(nil, "t", 1, 0, dues[i], nil, nil)
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("due key of %d does not sort before that of %d", dues[i-1], dues[i])
		}
		_, _, _, due, _, _, err := decodeDueKey(b)
		if err != nil || due != dues[i] {
			t.Errorf("decodeDueKey(due %d) = %d, %v", dues[i], due, err)
		}
	}
	if _, _, _, _, _, _, err := decodeDueKey(appendDueKey(nil, "t", 1, 0, 5, []byte("abc"), nil)[:20]); err == nil {
		t.Error("decodeDueKey of a truncated key: no error")
	}
}

func TestTimersSetReplaceDelete(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	s2 := mustStreamID(t, db, "t", "s2")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 1, Writes: []Write{set("n", "v")},
			Timers: []TimerOp{setTimer("x", 0, 10, "px"), setTimer("y", 1, 20, ""), setTimer("", 0, 30, "empty name")}},
		{Stream: s, Key: []byte{}, Mark: NoneApplied, Timers: []TimerOp{setTimer("x", 0, 15, "k0")}},
		{Stream: s2, Key: []byte("a"), Mark: 1, Timers: []TimerOp{setTimer("x", 0, 5, "other stream")}},
	}})
	for _, c := range []struct{ key, name, want string }{
		{"a", "x", "a/x@0:10=px"},
		{"a", "y", "a/y@1:20="},
		{"a", "", "a/@0:30=empty name"},
		{"", "x", "/x@0:15=k0"},
		{"a", "z", "<none>"},
		{"b", "x", "<none>"},
	} {
		if got := timerOf(t, db, s, c.key, c.name); got != c.want {
			t.Errorf("Timer(%q, %q) = %s, want %s", c.key, c.name, got, c.want)
		}
	}
	if n, err := db.TimerCount("t", s); err != nil || n != 4 {
		t.Errorf("TimerCount = %d, %v; want 4", n, err)
	}

	// Replace x (earlier, later and into the other domain), delete y,
	// delete a timer that never existed; a later operation on a name wins.
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 2, Timers: []TimerOp{
			setTimer("x", 0, 40, "first"), setTimer("x", 0, 3, "px2"),
			delTimer("y"), delTimer("never"),
			setTimer("w", 0, 7, "gone"), delTimer("w"),
			delTimer("v"), setTimer("v", 1, -5, "back"),
		}},
		{Stream: s, Key: []byte{}, Mark: NoneApplied, Timers: []TimerOp{setTimer("x", 1, 15, "k0 domain 1")}},
	}})
	for _, c := range []struct{ key, name, want string }{
		{"a", "x", "a/x@0:3=px2"},
		{"a", "y", "<none>"},
		{"a", "w", "<none>"},
		{"a", "v", "a/v@1:-5=back"},
		{"", "x", "/x@1:15=k0 domain 1"},
	} {
		if got := timerOf(t, db, s, c.key, c.name); got != c.want {
			t.Errorf("after replace: Timer(%q, %q) = %s, want %s", c.key, c.name, got, c.want)
		}
	}
	// The due index holds no stale entry (checkDB checks the same at cleanup).
	if got, next := dueTimers(t, db, s, 0, math.MaxInt64, nil, 100); !slices.Equal(got, []string{"a/x@0:3=px2", "a/@0:30=empty name"}) || next != "-" {
		t.Errorf("domain 0 after replace: DueTimers = %q, next %s", got, next)
	}
	if got, next := dueTimers(t, db, s, 1, math.MaxInt64, nil, 100); !slices.Equal(got, []string{"a/v@1:-5=back", "/x@1:15=k0 domain 1"}) || next != "-" {
		t.Errorf("domain 1 after replace: DueTimers = %q, next %s", got, next)
	}
	if got, _ := dueTimers(t, db, s2, 0, math.MaxInt64, nil, 100); !slices.Equal(got, []string{"a/x@0:5=other stream"}) {
		t.Errorf("other stream: DueTimers = %q", got)
	}
	if got, _ := dueTimers(t, db, s, 2, math.MaxInt64, nil, 100); got != nil {
		t.Errorf("domain 2: DueTimers = %q, want none", got)
	}
	if err := checkDB(db); err != nil {
		t.Fatal(err)
	}

	// Delete everything; a mark-only key group may carry timer deletes.
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 3, Timers: []TimerOp{delTimer("x"), delTimer("v"), delTimer("")}},
		{Stream: s, Key: []byte{}, Mark: DropMark, Timers: []TimerOp{delTimer("x")}},
	}})
	if n, err := db.TimerCount("t", s); err != nil || n != 0 {
		t.Errorf("TimerCount after deleting all = %d, %v; want 0", n, err)
	}
	for _, d := range []uint8{0, 1} {
		if got, next := dueTimers(t, db, s, d, math.MaxInt64, nil, 100); got != nil || next != "-" {
			t.Errorf("domain %d after deleting all: DueTimers = %q, next %s", d, got, next)
		}
	}
	if got := getString(t, db, "t", s, "a", "n"); got != "v" {
		t.Errorf("state changed by timer operations: %q", got)
	}
}

// TestDueTimersOrder checks the order (due, key by length then bytes, name),
// negative times, upTo, limit, next, stopping in fn and paging with after.
func TestDueTimersOrder(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	type tm struct {
		key, name string
		due       int64
	}
	timers := []tm{
		{"b", "n", 5}, {"aa", "n", 5}, {"a", "m", 5}, {"a", "n", 5}, {"", "", 5},
		{"b", "n2", -3}, {"zz", "", math.MinInt64}, {"a", "late", math.MaxInt64},
		{"c", "x", 0}, {"c", "y", -1}, {"d", "x", 100},
	}
	byKey := map[string][]TimerOp{}
	for _, x := range timers {
		byKey[x.key] = append(byKey[x.key], setTimer(x.name, 0, x.due, "p-"+x.key+x.name))
	}
	cp := &Checkpoint{Task: "t"}
	for k, ops := range byKey {
		cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: []byte(k), Mark: NoneApplied, Timers: ops})
	}
	// A timer of the other domain interleaved in time must not appear.
	cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: []byte("other"), Mark: NoneApplied,
		Timers: []TimerOp{setTimer("o", 1, 1, "")}})
	mustCommit(t, db, cp)

	all := []string{
		"zz/@0:-9223372036854775808=p-zz",
		"b/n2@0:-3=p-bn2",
		"c/y@0:-1=p-cy",
		"c/x@0:0=p-cx",
		"/@0:5=p-",
		"a/m@0:5=p-am",
		"a/n@0:5=p-an",
		"b/n@0:5=p-bn",
		"aa/n@0:5=p-aan",
		"d/x@0:100=p-dx",
		"a/late@0:9223372036854775807=p-alate",
	}
	tests := []struct {
		name     string
		upTo     int64
		after    *TimerRef
		limit    int
		want     []string
		wantNext string
	}{
		{name: "all", upTo: math.MaxInt64, limit: 100, want: all, wantNext: "-"},
		{name: "up to 5", upTo: 5, limit: 100, want: all[:9], wantNext: "100"},
		{name: "up to 4", upTo: 4, limit: 100, want: all[:4], wantNext: "5"},
		{name: "none due", upTo: math.MinInt64 + 1, limit: 100, want: all[:1], wantNext: "-3"},
		{name: "limit", upTo: 5, limit: 3, want: all[:3], wantNext: "0"},
		{name: "limit exactly at the due ones", upTo: 5, limit: 9, want: all[:9], wantNext: "100"},
		{name: "limit one short", upTo: 5, limit: 8, want: all[:8], wantNext: "5"},
		{name: "limit 0 peeks", upTo: 5, limit: 0, want: nil, wantNext: "-9223372036854775808"},
		{name: "after", upTo: 5, after: &TimerRef{Due: 5, Key: []byte("a"), Name: []byte("m")}, limit: 100, want: all[6:9], wantNext: "100"},
		{name: "after a missing timer", upTo: 100, after: &TimerRef{Due: 5, Key: []byte("a"), Name: []byte("mm")}, limit: 100, want: all[6:10], wantNext: "9223372036854775807"},
		{name: "after a name prefix", upTo: 5, after: &TimerRef{Due: 5, Key: []byte("a"), Name: []byte("")}, limit: 100, want: all[5:9], wantNext: "100"},
		{name: "after the last", upTo: math.MaxInt64, after: &TimerRef{Due: math.MaxInt64, Key: []byte("a"), Name: []byte("late")}, limit: 100, want: nil, wantNext: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next := dueTimers(t, db, s, 0, tt.upTo, tt.after, tt.limit)
			if !slices.Equal(got, tt.want) || next != tt.wantNext {
				t.Errorf("DueTimers = %q, next %s; want %q, next %s", got, next, tt.want, tt.wantNext)
			}
		})
	}

	t.Run("fn stops", func(t *testing.T) {
		var got []string
		next, ok, err := db.DueTimers("t", s, 0, math.MaxInt64, nil, 100, func(tm Timer) bool {
			got = append(got, timerString(tm))
			return len(got) < 2
		})
		if err != nil || !ok || next != -1 || !slices.Equal(got, all[:2]) {
			t.Errorf("DueTimers stopped by fn = %q, next %d, %v, %v; want %q, next -1", got, next, ok, err, all[:2])
		}
	})

	t.Run("paging", func(t *testing.T) {
		var got []string
		var after *TimerRef
		for page := 0; ; page++ {
			if page > len(all) {
				t.Fatal("paging does not end")
			}
			var last Timer
			n := 0
			_, ok, err := db.DueTimers("t", s, 0, math.MaxInt64, after, 2, func(tm Timer) bool {
				got = append(got, timerString(tm))
				last = tm
				n++
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if n != 2 {
				t.Fatalf("page %d: %d timers and more to come", page, n)
			}
			after = &TimerRef{Due: last.Due, Key: last.Key, Name: last.Name}
		}
		if !slices.Equal(got, all) {
			t.Errorf("paged DueTimers = %q, want %q", got, all)
		}
	})
}

func TestTimerValidation(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true})
	s := mustStreamID(t, db, "t", "s")
	long := make([]byte, MaxTimerKeyLen-len("t")) // key at the limit with an empty name
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: long[:100], Mark: 1, Timers: []TimerOp{{Name: long[100:], Due: 1}}},
	}})
	if _, ok, err := db.Timer("t", s, long[:100], long[100:]); err != nil || !ok {
		t.Errorf("timer at the key limit: Timer = %v, %v", ok, err)
	}
	for _, c := range []struct {
		name string
		kw   KeyWrites
		want error
	}{
		{"key and name one over", KeyWrites{Stream: s, Key: long, Mark: 1, Timers: []TimerOp{setTimer("n", 0, 1, "")}}, ErrKeyTooLarge},
		{"delete one over", KeyWrites{Stream: s, Key: long, Mark: 1, Timers: []TimerOp{delTimer("n")}}, ErrKeyTooLarge},
		{"domain 2", KeyWrites{Stream: s, Key: []byte("k"), Mark: 1, Timers: []TimerOp{setTimer("n", 2, 1, "")}}, ErrInvalidCheckpoint},
	} {
		err := db.Commit(&Checkpoint{Task: "t", Keys: []KeyWrites{c.kw}})
		var ke *KeyError
		if !errors.Is(err, c.want) || !errors.As(err, &ke) {
			t.Errorf("%s: Commit error = %v, want a *KeyError wrapping %v", c.name, err, c.want)
		}
	}
	// The domain of a delete is ignored.
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("k"), Mark: 1, Timers: []TimerOp{{Name: []byte("n"), Delete: true, Domain: 9}}},
	}})
}

// TestDueTimersModel runs random timer operations against a model and checks
// after every commit that DueTimers from the start (which uses and raises the
// in-memory due floors), with and without after, agrees with the model;
// between commits it also reopens the store, which forgets the floors.
func TestDueTimersModel(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "t", "s")
	type id struct{ key, name string }
	type tm struct {
		domain uint8
		due    int64
	}
	model := map[id]tm{}
	r := rand.New(rand.NewPCG(5, 6))
	want := func(domain uint8, upTo int64) []string {
		var out []Timer
		for k, v := range model {
			if v.domain == domain && v.due <= upTo {
				out = append(out, Timer{Key: []byte(k.key), Name: []byte(k.name), Domain: domain, Due: v.due})
			}
		}
		slices.SortFunc(out, func(a, b Timer) int {
			return bytes.Compare(appendDueKey(nil, "t", s, domain, a.Due, a.Key, a.Name), appendDueKey(nil, "t", s, domain, b.Due, b.Key, b.Name))
		})
		var strs []string
		for _, x := range out {
			strs = append(strs, fmt.Sprintf("%s/%s@%d:%d=", x.Key, x.Name, x.Domain, x.Due))
		}
		return strs
	}
	for round := range 200 {
		cp := &Checkpoint{Task: "t"}
		for k := range 1 + r.IntN(5) {
			kw := KeyWrites{Stream: s, Key: fmt.Appendf(nil, "k%d", k*7+r.IntN(7)), Mark: NoneApplied}
			for range 1 + r.IntN(4) {
				name := fmt.Sprint("n", r.IntN(3))
				key := id{string(kw.Key), name}
				if r.IntN(3) == 0 {
					kw.Timers = append(kw.Timers, delTimer(name))
					delete(model, key)
					continue
				}
				op := setTimer(name, uint8(r.IntN(2)), int64(r.IntN(200)-100), "")
				kw.Timers = append(kw.Timers, op)
				model[key] = tm{op.Domain, op.Due}
			}
			cp.Keys = append(cp.Keys, kw)
		}
		mustCommit(t, db, cp)
		if round%50 == 49 {
			mustClose(t, db)
			db = openTestDBAt(t, dir, Options{})
		}
		for domain := range uint8(2) {
			upTo := int64(r.IntN(220) - 110)
			w := want(domain, upTo)
			got, _ := dueTimers(t, db, s, domain, upTo, nil, 1000)
			if !slices.Equal(got, w) {
				t.Fatalf("round %d domain %d up to %d: DueTimers = %q, want %q", round, domain, upTo, got, w)
			}
			if len(w) > 1 { // from after the first one
				first, _, _ := strings.Cut(w[0], "@")
				key, name, _ := strings.Cut(first, "/")
				tmr := model[id{key, name}]
				got, _ := dueTimers(t, db, s, domain, upTo, &TimerRef{Due: tmr.due, Key: []byte(key), Name: []byte(name)}, 1000)
				if !slices.Equal(got, w[1:]) {
					t.Fatalf("round %d domain %d: DueTimers after the first = %q, want %q", round, domain, got, w[1:])
				}
			}
		}
	}
}

// TestDueTimersConcurrent reads due timers while another goroutine commits
// timers that are due at once, each one earlier than the last, and checks
// that a read after the last commit returns every timer: the due floor the
// reader raises never skips a timer a concurrent commit set. Run with -race.
func TestDueTimersConcurrent(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	const n = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := db.Commit(&Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: fmt.Appendf(nil, "k%d", i), Mark: NoneApplied,
				Timers: []TimerOp{setTimer("n", 0, int64(n-i), "")}}}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for running := true; running; reads++ {
		select {
		case <-done:
			running = false
		default:
		}
		if _, _, err := db.DueTimers("t", s, 0, math.MaxInt64, nil, 5, func(Timer) bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := dueTimers(t, db, s, 0, math.MaxInt64, nil, 2*n)
	if len(got) != n || got[0] != fmt.Sprintf("k%d/n@0:1=", n-1) {
		t.Errorf("after %d concurrent reads: DueTimers = %d timers, first %q; want %d, first k%d", reads, len(got), got[0], n, n-1)
	}
}

// PendingTimers counts once and then follows every commit (sets, replaces, deletes, in one
// transaction or several) without reading the timers again; DropStream makes it count again.
func TestPendingTimersFollowsCommits(t *testing.T) {
	db := openTestDB(t, Options{MaxTxnEntries: 20})
	s := mustStreamID(t, db, "t", "s")
	s2 := mustStreamID(t, db, "t", "s2")
	check := func(when string) {
		t.Helper()
		for _, st := range []uint32{s, s2} {
			want, err := db.TimerCount("t", st)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := db.PendingTimers("t", st); err != nil || got != int64(want) {
				t.Errorf("%s: stream %d: PendingTimers = %d, %v; want %d", when, st, got, err, want)
			}
		}
	}
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 1, Timers: []TimerOp{setTimer("x", 0, 10, "")}},
	}})
	check("before the first count")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 2, Timers: []TimerOp{
			setTimer("x", 0, 40, "replaced"), setTimer("y", 1, 20, ""), delTimer("never"),
			setTimer("w", 0, 7, "gone"), delTimer("w")}},
		{Stream: s2, Key: []byte("b"), Mark: 1, Timers: []TimerOp{setTimer("x", 0, 5, "")}},
	}})
	check("after sets, a replace and deletes")
	// Many keys: the commit takes several transactions.
	var many []KeyWrites
	for k := range 30 {
		many = append(many, KeyWrites{Stream: s2, Key: fmt.Appendf(nil, "k%02d", k), Mark: 1,
			Timers: []TimerOp{setTimer("t", 0, int64(k), "")}})
	}
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: many})
	check("after a commit of several transactions")
	if n, _ := db.PendingTimers("t", s2); n != 31 {
		t.Errorf("stream s2: PendingTimers = %d, want 31", n)
	}
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 3, Timers: []TimerOp{delTimer("x"), delTimer("y")}},
	}})
	check("after deleting every timer of a key")
	if err := db.DropStream("t", s2); err != nil {
		t.Fatal(err)
	}
	check("after DropStream")
	if n, _ := db.PendingTimers("t", s2); n != 0 {
		t.Errorf("after DropStream: PendingTimers = %d, want 0", n)
	}
}
