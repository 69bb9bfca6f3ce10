package sched

// minDeque is the smallest ring a deque allocates and the size below which it never shrinks.
const minDeque = 4

// deque is a double-ended queue on a ring buffer whose size is a power of two. It grows by
// doubling and shrinks by half when a quarter full, so its memory follows its length. The zero
// value is empty and ready to use.
type deque[E any] struct {
	buf  []E
	head int
	n    int
}

func (d *deque[E]) len() int { return d.n }

// at returns the i-th element from the front.
func (d *deque[E]) at(i int) E { return d.buf[(d.head+i)&(len(d.buf)-1)] }

func (d *deque[E]) front() E { return d.buf[d.head] }

func (d *deque[E]) pushBack(e E) {
	if d.n == len(d.buf) {
		d.resize(max(minDeque, 2*len(d.buf)))
	}
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = e
	d.n++
}

func (d *deque[E]) pushFront(e E) {
	if d.n == len(d.buf) {
		d.resize(max(minDeque, 2*len(d.buf)))
	}
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = e
	d.n++
}

// insert puts e at index i (0 <= i <= len), moving the elements from i on one place back.
func (d *deque[E]) insert(i int, e E) {
	d.pushBack(e)
	mask := len(d.buf) - 1
	for j := d.n - 1; j > i; j-- {
		d.buf[(d.head+j)&mask] = d.buf[(d.head+j-1)&mask]
	}
	d.buf[(d.head+i)&mask] = e
}

// popFront removes and returns the front element; the deque must not be empty.
func (d *deque[E]) popFront() E {
	var zero E
	e := d.buf[d.head]
	d.buf[d.head] = zero // drop the reference for the garbage collector
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	if len(d.buf) > minDeque && d.n < len(d.buf)/4 {
		d.resize(len(d.buf) / 2)
	}
	return e
}

// clear empties the deque and releases its buffer.
func (d *deque[E]) clear() { *d = deque[E]{} }

func (d *deque[E]) resize(c int) {
	buf := make([]E, c)
	if d.n > 0 {
		// Copy the (at most two) contiguous runs.
		k := copy(buf, d.buf[d.head:min(d.head+d.n, len(d.buf))])
		copy(buf[k:], d.buf[:d.n-k])
	}
	d.buf, d.head = buf, 0
}
