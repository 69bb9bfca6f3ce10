package statecache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSlotListRandomOrder inserts names in random order past several block splits, deletes
// some with keep, and checks the list against a sorted slice after each step: the order,
// find's answers for present and absent names, and from's iteration from a found position.
func TestSlotListRandomOrder(t *testing.T) {
	const n = 5*slotBlock + 77
	rng := rand.New(rand.NewPCG(1, 2))
	var l slotList
	var want []string
	for _, k := range rng.Perm(n) {
		name := []byte(fmt.Sprintf("n%06d", 2*k))
		p, found := l.find(name)
		if found {
			t.Fatalf("%s found before its insert", name)
		}
		l.insert(p, slot{name: name})
		want = append(want, string(name))
	}
	slices.Sort(want)
	check := func(step string) {
		t.Helper()
		var got []string
		for _, s := range l.all() {
			got = append(got, string(s.name))
		}
		if !slices.Equal(got, want) || l.len() != len(want) {
			t.Fatalf("%s: %d slots (len %d), want %d in order", step, len(got), l.len(), len(want))
		}
		for _, blk := range l.blocks {
			if len(blk) == 0 || len(blk) > 2*slotBlock {
				t.Fatalf("%s: a block of %d slots", step, len(blk))
			}
		}
		for i, name := range want {
			p, found := l.find([]byte(name))
			if !found || string(l.at(p).name) != name {
				t.Fatalf("%s: find(%s) = %v, %v", step, name, p, found)
			}
			var next []string
			l.from(p, func(s *slot) bool { next = append(next, string(s.name)); return len(next) < 3 })
			if !slices.Equal(next, want[i:min(i+3, len(want))]) {
				t.Fatalf("%s: from %s: %q, want %q", step, name, next, want[i:min(i+3, len(want))])
			}
			// An absent name just after it: from there the iteration starts at the next name.
			absent := append([]byte(name), '!')
			p, found = l.find(absent)
			if found {
				t.Fatalf("%s: found absent %s", step, absent)
			}
			var first []byte
			l.from(p, func(s *slot) bool { first = s.name; return false })
			if i+1 < len(want) && !bytes.Equal(first, []byte(want[i+1])) || i+1 == len(want) && first != nil {
				t.Fatalf("%s: from absent %s starts at %q", step, absent, first)
			}
		}
	}
	check("inserted")
	l.keep(func(s *slot) bool { return s.name[len(s.name)-1] != '0' })
	want = slices.DeleteFunc(want, func(s string) bool { return s[len(s)-1] == '0' })
	check("after keep")
	l.keep(func(*slot) bool { return false })
	want = nil
	check("emptied")
	if p, found := l.find([]byte("a")); found || p != (slotPos{}) {
		t.Fatalf("find in an empty list: %v, %v", p, found)
	}
}
