package task

import "unsafe"

// Admitting a record used to make two heap allocations of its own: its item and its sequencing
// key as a string (the scheduler's key). Both are carved from shared blocks instead, as pebble
// and CockroachDB carve keys from byte blocks: one allocation per itemBlock records and one per
// keyBlock bytes of keys. A block lives while anything carved from it does, so the items of
// completed records are cleared (dropItems): a block held by one slow key keeps no other record's
// bytes alive.

const (
	itemBlock = 128      // items per block
	keyBlock  = 16 << 10 // bytes per key block
	keyCarved = 256      // longer keys get an allocation of their own
)

// carver hands out items and strings from blocks. It belongs to the loop goroutine.
type carver struct {
	items []item
	keys  []byte
}

// item returns a zeroed item.
func (c *carver) item() *item {
	if len(c.items) == 0 {
		c.items = make([]item, itemBlock)
	}
	it := &c.items[0]
	c.items = c.items[1:]
	return it
}

// string returns b as a string. Its bytes are never written again: the block is only appended to.
func (c *carver) string(b []byte) string {
	switch {
	case len(b) == 0:
		return ""
	case len(b) > keyCarved:
		return string(b)
	case cap(c.keys)-len(c.keys) < len(b):
		c.keys = make([]byte, 0, keyBlock)
	}
	n := len(c.keys)
	c.keys = append(c.keys, b...)
	return unsafe.String(&c.keys[n], len(b))
}

// dropItems clears the record items of a completed job: nothing refers to them once the
// scheduler has completed their batch, and clearing them drops their references to the records'
// bytes. Firings and migrations are not carved and are left alone (the timer queue may still
// refer to a firing).
func dropItems(j *job) {
	for _, it := range j.items {
		if v := it.Value; v.fire == nil && !v.migrate {
			*v = item{}
		}
	}
}
