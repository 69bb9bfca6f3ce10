package statecache

import (
	"bytes"
	"slices"
	"sort"
)

// slotBlock is how many slots a block of a slotList holds after a split; a block splits when it
// grows past twice that.
const slotBlock = 512

// slotList is a key's names in ascending order, in blocks of at most 2×slotBlock slots, so that
// inserting a name moves at most a block's slots and the list of blocks, not every slot of the
// key: one key putting 2·10^5 names in random order took 24 s through the binary with one sorted
// slice (each insert moved half the key's slots), 4× the time of 10^5 names.
type slotList struct {
	blocks [][]slot // each non-empty and sorted, every name of a block before the next block's
	n      int
}

// slotPos is a position in a slotList: block b, index i (i may be the block's length: the
// position after its last slot).
type slotPos struct{ b, i int }

// len returns how many slots the list holds.
func (l *slotList) len() int { return l.n }

// find returns the position of name, or where it would be inserted, and whether it is there.
func (l *slotList) find(name []byte) (slotPos, bool) {
	if len(l.blocks) == 0 {
		return slotPos{}, false
	}
	// The last block whose first name is at or before name (block 0 for a name before all).
	b := max(0, sort.Search(len(l.blocks), func(k int) bool { return bytes.Compare(l.blocks[k][0].name, name) > 0 })-1)
	blk := l.blocks[b]
	i := sort.Search(len(blk), func(i int) bool { return bytes.Compare(blk[i].name, name) >= 0 })
	return slotPos{b, i}, i < len(blk) && bytes.Equal(blk[i].name, name)
}

// at returns the slot at p, which must hold one.
func (l *slotList) at(p slotPos) *slot { return &l.blocks[p.b][p.i] }

// insert puts s at p, a position find returned for s's name.
func (l *slotList) insert(p slotPos, s slot) {
	l.n++
	if len(l.blocks) == 0 {
		l.blocks = [][]slot{{s}}
		return
	}
	l.blocks[p.b] = slices.Insert(l.blocks[p.b], p.i, s)
	if blk := l.blocks[p.b]; len(blk) > 2*slotBlock {
		right := slices.Clone(blk[slotBlock:])
		clear(blk[slotBlock:])
		l.blocks[p.b] = blk[:slotBlock]
		l.blocks = slices.Insert(l.blocks, p.b+1, right)
	}
}

// from calls fn for each slot from p on, in order, until fn returns false.
func (l *slotList) from(p slotPos, fn func(s *slot) bool) {
	for b := p.b; b < len(l.blocks); b++ {
		blk := l.blocks[b]
		i := 0
		if b == p.b {
			i = p.i
		}
		for ; i < len(blk); i++ {
			if !fn(&blk[i]) {
				return
			}
		}
	}
}

// each calls fn for every slot, in order, until fn returns false.
func (l *slotList) each(fn func(s *slot) bool) { l.from(slotPos{}, fn) }

// keep removes the slots for which fn returns false.
func (l *slotList) keep(fn func(s *slot) bool) {
	blocks := l.blocks[:0]
	for _, blk := range l.blocks {
		kept := blk[:0]
		for i := range blk {
			if fn(&blk[i]) {
				kept = append(kept, blk[i])
			}
		}
		clear(blk[len(kept):])
		l.n -= len(blk) - len(kept)
		if len(kept) > 0 {
			blocks = append(blocks, kept)
		}
	}
	clear(l.blocks[len(blocks):])
	l.blocks = blocks
}

// all returns a copy of every slot, in order (for tests).
func (l *slotList) all() []slot {
	out := make([]slot, 0, l.n)
	l.each(func(s *slot) bool { out = append(out, *s); return true })
	return out
}
