package sched

// delayHeap is a min-heap of delayed keys ordered by their deadline (key.until). Each key knows
// its index (key.heapIdx, -1 when absent), so a deadline can be changed or removed in O(log n).
type delayHeap[T any] []*key[T]

func (h delayHeap[T]) less(i, j int) bool { return h[i].until.Before(h[j].until) }

func (h delayHeap[T]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *delayHeap[T]) push(k *key[T]) {
	k.heapIdx = len(*h)
	*h = append(*h, k)
	h.up(k.heapIdx)
}

// remove takes k out of the heap; k must be in it.
func (h *delayHeap[T]) remove(k *key[T]) {
	i, last := k.heapIdx, len(*h)-1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	k.heapIdx = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the heap order after the deadline of the key at i changed.
func (h delayHeap[T]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h delayHeap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h delayHeap[T]) down(i0 int) bool {
	i := i0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		j := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
