package modrt

import (
	"context"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// Linear memory outside the Go heap.
//
// By default wazero keeps an instance's linear memory in a Go slice that it reallocates (a
// copy) as the guest grows it, and that the garbage collector frees some time after the
// instance is closed, when the heap has doubled. With every worker's guest growing to the
// memory limit and trapping, the process then holds the limit several times over per worker.
//
// Where the platform allows (mmapMemory, on Unix), an instance's memory is instead one mapping
// of its maximum size made when it is instantiated: growing it only moves its end (the pages
// become resident as the guest touches them, no copy), and closing the instance unmaps it at
// once. A mapping that cannot be made falls back to a Go slice (heapMemory).

// memoryAllocator makes the linear memories of instances, counting their bytes in live.
type memoryAllocator struct {
	live *atomic.Int64
}

// withMemoryAllocator returns ctx with the allocator wazero uses for the memories of the
// modules instantiated with it.
func withMemoryAllocator(ctx context.Context, live *atomic.Int64) context.Context {
	return experimental.WithMemoryAllocator(ctx, memoryAllocator{live: live})
}

func (a memoryAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	if m := newMmapMemory(max, a.live); m != nil {
		return m
	}
	return &heapMemory{buf: make([]byte, 0, capacity), max: max, live: a.live}
}

// heapMemory is a linear memory in a Go slice, as wazero's own.
type heapMemory struct {
	buf  []byte
	max  uint64
	live *atomic.Int64
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	old := uint64(len(m.buf))
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
	} else {
		m.buf = append(m.buf, make([]byte, size-old)...)
	}
	m.live.Add(int64(size) - int64(old))
	return m.buf
}

func (m *heapMemory) Free() {
	m.live.Add(-int64(len(m.buf)))
	m.buf = nil
}
