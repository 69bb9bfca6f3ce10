package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/store"
)

// What a crash test prints when the state it reads differs from the model: enough to tell a
// whole partition's run of records lost (a position or a group offset ahead of the stored state)
// from one key's (its applied mark or the stream's applied set claiming records whose writes are
// not stored). CI26 printed 20 diff lines of one user, in map order, and nothing else.

// diffSummary counts what diffState found: the users and words that differ and by how much,
// and the users furthest off.
func diffSummary(want, got wordcountExpect) string {
	users := map[string]int{} // user -> signed difference, got - want
	words, short, over := 0, 0, 0
	add := func(u string, d int) {
		words++
		users[u] += d
		if d < 0 {
			short -= d
		} else {
			over += d
		}
	}
	for u, ws := range want {
		for w, n := range ws {
			if g := got[u][w]; g != n {
				add(u, g-n)
			}
		}
	}
	for u, ws := range got {
		for w, n := range ws {
			if _, ok := want[u][w]; !ok {
				add(u, n)
			}
		}
	}
	names := make([]string, 0, len(users))
	for u := range users {
		names = append(names, u)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(abs(users[b]), abs(users[a])), cmp.Compare(a, b))
	})
	var top []string
	for _, u := range names[:min(len(names), 10)] {
		top = append(top, fmt.Sprintf("%s %+d", u, users[u]))
	}
	return fmt.Sprintf("%d of %d users differ, %d of their words: %d counts short, %d over; most off: %s",
		len(users), len(want), words, short, over, strings.Join(top, ", "))
}

func abs(n int) int { return max(n, -n) }

// inputRecord is one record a Kafka crash test produced: where it landed and what it says.
type inputRecord struct {
	partition int32
	offset    int64
	user      string
	text      string
}

// kafkaStateReport describes, for a failure, the state that differs from the model by partition
// of the input topic (the store's stream kafka:<topic>/<p>): how short each partition is, its
// stored position and applied set, the group's committed offset and the topic's end; then, for
// the keys furthest off, which of their records the state lacks and what replay would have made
// of each (below the stored Next, in the applied set, at or below the key's mark). It reads the
// store of a stopped host.
func kafkaStateReport(dataDir, task, brokers, group, topic string, want, got wordcountExpect, recs []inputRecord) string {
	var b strings.Builder
	fmt.Fprintln(&b, diffSummary(want, got))

	byUser := map[string][]inputRecord{}
	partOf := map[string]int32{}
	for _, r := range recs {
		byUser[r.user] = append(byUser[r.user], r)
		partOf[r.user] = r.partition
	}
	for _, rs := range byUser {
		slices.SortFunc(rs, func(a, b inputRecord) int { return cmp.Compare(a.offset, b.offset) })
	}
	type partSum struct{ users, differ, short, over int }
	parts := map[int32]*partSum{}
	shortOf := map[string]int{}
	for u := range byUser {
		p := parts[partOf[u]]
		if p == nil {
			p = &partSum{}
			parts[partOf[u]] = p
		}
		p.users++
		d := 0
		for w, n := range want[u] {
			if g := got[u][w]; g < n {
				p.short += n - g
				d += n - g
			} else if g > n {
				p.over += g - n
				d += g - n
			}
		}
		if d > 0 {
			p.differ++
			shortOf[u] = d
		}
	}

	db, err := store.Open(filepath.Join(dataDir, "state"), store.Options{ReadOnly: true})
	if err != nil {
		fmt.Fprintf(&b, "store: %v\n", err)
		return b.String()
	}
	defer db.Close()
	streamOf := map[int32]uint32{}
	if infos, err := db.Streams(task); err == nil {
		for _, si := range infos {
			if p, ok := strings.CutPrefix(si.Name, "kafka:"+topic+"/"); ok {
				if n, err := strconv.Atoi(p); err == nil {
					streamOf[int32(n)] = si.ID
				}
			}
		}
	} else {
		fmt.Fprintf(&b, "store streams: %v\n", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var committed kadm.OffsetResponses
	var ends kadm.ListedOffsets
	if cl, err := kgo.NewClient(kgo.SeedBrokers(brokers)); err == nil {
		adm := kadm.NewClient(cl)
		if committed, err = adm.FetchOffsets(ctx, group); err != nil {
			fmt.Fprintf(&b, "group offsets: %v\n", err)
		}
		if ends, err = adm.ListEndOffsets(ctx, topic); err != nil {
			fmt.Fprintf(&b, "end offsets: %v\n", err)
		}
		cl.Close()
	}

	pids := make([]int32, 0, len(parts))
	for p := range parts {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	for _, p := range pids {
		s := parts[p]
		fmt.Fprintf(&b, "partition %d: %d of its %d users differ, %d counts short, %d over; ", p, s.differ, s.users, s.short, s.over)
		if id, ok := streamOf[p]; ok {
			pos, found, err := db.Position(task, id)
			switch {
			case err != nil:
				fmt.Fprintf(&b, "stored position: %v; ", err)
			case !found:
				b.WriteString("no stored position; ")
			default:
				fmt.Fprintf(&b, "stored Next %d Horizon %d Resume %d LeaderEpoch %d; ", pos.Next, pos.Horizon, pos.Resume, pos.LeaderEpoch.Epoch())
			}
			if set, err := db.Applied(task, id); err != nil {
				fmt.Fprintf(&b, "applied set: %v; ", err)
			} else {
				fmt.Fprintf(&b, "applied set base %d, %d offsets, last %d; ", set.Base, set.Len(), set.Last())
			}
		} else {
			b.WriteString("no stream in the store; ")
		}
		if o, ok := committed.Lookup(topic, p); ok {
			fmt.Fprintf(&b, "group committed %d (leader epoch %d, err %v); ", o.At, o.LeaderEpoch, o.Err)
		} else {
			b.WriteString("no group offset; ")
		}
		if o, ok := ends.Lookup(topic, p); ok {
			fmt.Fprintf(&b, "end %d", o.Offset)
		}
		b.WriteString("\n")
	}

	users := make([]string, 0, len(shortOf))
	for u := range shortOf {
		users = append(users, u)
	}
	slices.SortFunc(users, func(a, b string) int { return cmp.Or(cmp.Compare(shortOf[b], shortOf[a]), cmp.Compare(a, b)) })
	for _, u := range users[:min(len(users), 8)] {
		b.WriteString(keyReport(db, task, streamOf[partOf[u]], u, byUser[u], got[u]))
		b.WriteString("\n")
	}
	return b.String()
}

// keyReport says which of a key's records (in offset order) its stored counts lack: whether the
// counts are those of a prefix of its records (the records after it lost: a tail), and for the
// records from the first one the counts lack, what replay would have made of each.
func keyReport(db *store.DB, task string, stream uint32, user string, rs []inputRecord, got map[string]int) string {
	var b strings.Builder
	mark, hasMark, err := db.Mark(task, stream, []byte(user))
	pos, _, _ := db.Position(task, stream)
	set, _ := db.Applied(task, stream)
	fmt.Fprintf(&b, "%s: %d records, offsets %d..%d; ", user, len(rs), rs[0].offset, rs[len(rs)-1].offset)
	switch {
	case err != nil:
		fmt.Fprintf(&b, "mark: %v; ", err)
	case !hasMark:
		b.WriteString("no stored mark; ")
	default:
		fmt.Fprintf(&b, "stored mark %d; ", mark)
	}
	// The longest prefix whose counts are within the stored ones, and whether they are equal.
	counts := map[string]int{}
	fit := 0
	for fit < len(rs) {
		next := map[string]int{}
		within := true
		for _, w := range wordsOf(rs[fit].text) {
			next[w]++
			if counts[w]+next[w] > got[w] {
				within = false
			}
		}
		if !within {
			break
		}
		for w, n := range next {
			counts[w] += n
		}
		fit++
	}
	equal := len(counts) == len(got)
	for w, n := range got {
		equal = equal && counts[w] == n
	}
	if equal {
		fmt.Fprintf(&b, "the state is its first %d records' (a tail of %d lost)", fit, len(rs)-fit)
	} else {
		fmt.Fprintf(&b, "the state is no prefix of its records: the first %d fit", fit)
	}
	if fit < len(rs) {
		below, inSet, covered := 0, 0, 0
		for _, r := range rs[fit:] {
			switch {
			case r.offset < pos.Next:
				below++
			case set.Has(r.offset):
				inSet++
			}
			if hasMark && r.offset <= mark {
				covered++
			}
		}
		fmt.Fprintf(&b, "; from offset %d on (%d records): %d below the stored Next, %d more in the applied set, %d at or below the mark",
			rs[fit].offset, len(rs)-fit, below, inSet, covered)
		var offs []string
		for _, r := range rs[fit:min(len(rs), fit+12)] {
			offs = append(offs, strconv.FormatInt(r.offset, 10))
		}
		fmt.Fprintf(&b, "; offsets %s", strings.Join(offs, " "))
	}
	return b.String()
}

// wordsOf splits a text as wordcountExpect.add does.
func wordsOf(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
}

// replayExact checks, on the store a killed host left, the invariant the exact state rests on:
// for every key of the input topic's partitions, the stored state is exactly the effect of the
// records that a restart will skip (kafka.go openPartition, ingest.go admit): those below where
// the partition resumes (the stored Next, or the group's committed offset when that is further),
// and those up to the stored Horizon that the stream's applied set holds or that are at or below
// the key's mark. A key whose state lacks a skipped record's effect has lost it for good; one
// whose state holds a record replay runs again counts it twice. It returns a line per partition with keys off (nil: exact), naming a few of them with
// skipReport's detail. recs are every record produced so far; the host must be stopped. An
// error says the check could not be made (e.g. a store killed while it was being created).
// checked says, per partition, where a restart resumes and how many keys were checked.
func replayExact(dataDir, task, brokers, group, topic string, recs []inputRecord) (problems []string, checked string, err error) {
	db, err := store.Open(filepath.Join(dataDir, "state"), store.Options{ReadOnly: true})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "no store yet", nil // the run was killed before it made one
		}
		return nil, "", err
	}
	defer db.Close()
	streamOf := map[int32]uint32{}
	infos, err := db.Streams(task)
	if err != nil {
		return nil, "", err
	}
	for _, si := range infos {
		if p, ok := strings.CutPrefix(si.Name, "kafka:"+topic+"/"); ok {
			if n, err := strconv.Atoi(p); err == nil {
				streamOf[int32(n)] = si.ID
			}
		}
	}
	var committed kadm.OffsetResponses
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cl, err := kgo.NewClient(kgo.SeedBrokers(brokers)); err == nil {
		committed, err = kadm.NewClient(cl).FetchOffsets(ctx, group)
		cl.Close()
		if err != nil {
			return nil, "", fmt.Errorf("group offsets: %w", err)
		}
	}

	byPart := map[int32]map[string][]inputRecord{}
	for _, r := range recs {
		if byPart[r.partition] == nil {
			byPart[r.partition] = map[string][]inputRecord{}
		}
		byPart[r.partition][r.user] = append(byPart[r.partition][r.user], r)
	}
	parts := make([]int32, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		users := byPart[p]
		id, ok := streamOf[p]
		if !ok {
			continue // never checkpointed: nothing stored, nothing skipped but the group's offset
		}
		pos, found, err := db.Position(task, id)
		if err != nil {
			return problems, checked, fmt.Errorf("partition %d: position: %w", p, err)
		}
		if !found {
			pos = store.Position{Next: -1, Horizon: -1}
		}
		start := pos.Next
		groupAt := int64(-1)
		if o, ok := committed.Lookup(topic, p); ok && o.Err == nil {
			groupAt = o.At
			if found && o.At > start || !found {
				start = o.At
			}
		}
		set, err := db.Applied(task, id)
		if err != nil {
			return problems, checked, fmt.Errorf("partition %d: applied set: %w", p, err)
		}
		state := map[string]map[string]int{}
		err = db.ScanKeys(task, id, nil, func(key, name, val []byte) bool {
			n, _ := strconv.Atoi(string(val))
			if state[string(key)] == nil {
				state[string(key)] = map[string]int{}
			}
			state[string(key)][string(name)] = n
			return true
		})
		if err != nil {
			return problems, checked, fmt.Errorf("partition %d: state: %w", p, err)
		}
		var off []string
		for u, rs := range users {
			mark, hasMark, err := db.Mark(task, id, []byte(u))
			if err != nil {
				return problems, checked, fmt.Errorf("partition %d: mark of %s: %w", p, u, err)
			}
			skipped := map[string]int{}
			for _, r := range rs {
				skip := r.offset < start ||
					r.offset <= pos.Horizon && (set.Has(r.offset) || hasMark && r.offset <= mark)
				if skip {
					for _, w := range wordsOf(r.text) {
						skipped[w]++
					}
				}
			}
			if !sameCounts(skipped, state[u]) {
				off = append(off, u)
			}
		}
		checked += fmt.Sprintf("partition %d from %d (Next %d, Horizon %d, %d applied): %d keys, %d off; ", p, start, pos.Next, pos.Horizon, set.Len(), len(users), len(off))
		if len(off) == 0 {
			continue
		}
		slices.Sort(off)
		line := fmt.Sprintf("partition %d: %d of its %d keys' state is not what a restart skips (stored Next %d Horizon %d, applied set base %d of %d offsets last %d, group committed %d):",
			p, len(off), len(users), pos.Next, pos.Horizon, set.Base, set.Len(), set.Last(), groupAt)
		for _, u := range off[:min(len(off), 4)] {
			line += "\n    " + skipReport(db, task, id, start, pos, set, u, users[u], state[u])
		}
		problems = append(problems, line)
	}
	slices.Sort(problems)
	return problems, checked, nil
}

// sameCounts reports whether two word counts are equal, a zero count the same as none.
func sameCounts(a, b map[string]int) bool {
	for w, n := range a {
		if b[w] != n {
			return false
		}
	}
	for w, n := range b {
		if a[w] != n {
			return false
		}
	}
	return true
}

// skipReport details one key replayExact found off: its mark, and which of its records the
// state holds against which a restart skips, from the first record where the two part.
func skipReport(db *store.DB, task string, id uint32, start int64, pos store.Position, set store.AppliedSet, user string, rs []inputRecord, state map[string]int) string {
	mark, hasMark, _ := db.Mark(task, id, []byte(user))
	if !hasMark {
		mark = -2
	}
	// The longest prefix of the key's records whose counts the state holds.
	counts := map[string]int{}
	fit := 0
	for ; fit < len(rs); fit++ {
		ws := wordsOf(rs[fit].text)
		within := true
		next := map[string]int{}
		for _, w := range ws {
			next[w]++
			within = within && counts[w]+next[w] <= state[w]
		}
		if !within {
			break
		}
		for w, n := range next {
			counts[w] += n
		}
	}
	prefix := "no prefix of its records"
	if sameCounts(counts, state) {
		prefix = fmt.Sprintf("its first %d records'", fit)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: mark %d (-2: none), %d records at offsets %d..%d, the state is %s; from the %dth on:",
		user, mark, len(rs), rs[0].offset, rs[len(rs)-1].offset, prefix, fit)
	for _, r := range rs[max(fit-2, 0):min(len(rs), fit+10)] {
		how := "replayed"
		switch {
		case r.offset < start:
			how = "below start"
		case r.offset <= pos.Horizon && set.Has(r.offset):
			how = "in set"
		case r.offset <= pos.Horizon && r.offset <= mark:
			how = "under mark"
		}
		fmt.Fprintf(&b, " %d(%s)", r.offset, how)
	}
	return b.String()
}
