//go:build !(linux && (amd64 || arm64))

package modrt

import "sync/atomic"

// mmapMemory is not used on this platform: memories live in Go slices (heapMemory).
type mmapMemory = heapMemory

func newMmapMemory(max uint64, live *atomic.Int64) *mmapMemory { return nil }
