//go:build linux && (amd64 || arm64)

package modrt

import (
	"runtime"
	"sync/atomic"
	"syscall"
)

// mmapMemory is a linear memory in an anonymous mapping of its maximum size, reserved
// without swap (MAP_NORESERVE): only the pages the guest touches cost memory.
type mmapMemory struct {
	mapping []byte // the whole mapping
	size    uint64 // the memory's current size
	live    *atomic.Int64
	// unmap unmaps the mapping should the memory become unreachable without Free (an
	// instance dropped without Close): a safety net, stopped by Free.
	unmap runtime.Cleanup
}

// newMmapMemory maps max bytes, or returns nil when it cannot.
func newMmapMemory(max uint64, live *atomic.Int64) *mmapMemory {
	if max == 0 || max > 1<<32 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	m := &mmapMemory{mapping: b, live: live}
	m.unmap = runtime.AddCleanup(m, func(b []byte) { _ = syscall.Munmap(b) }, b)
	return m
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if m.mapping == nil || size > uint64(len(m.mapping)) {
		return nil
	}
	m.live.Add(int64(size) - int64(m.size))
	m.size = size
	return m.mapping[:size:size]
}

// Free unmaps the memory: wazero calls it when the instance is closed, after which nothing
// may read a view of it (modrt hands out views only for the duration of a host function).
func (m *mmapMemory) Free() {
	if m.mapping == nil {
		return
	}
	m.unmap.Stop()
	m.live.Add(-int64(m.size))
	_ = syscall.Munmap(m.mapping)
	m.mapping, m.size = nil, 0
}
