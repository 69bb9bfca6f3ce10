//go:build !wasip1

package wasmstream

import "github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"

// In a native build the guest's exports are plain functions a harness calls through host.Guest.
func init() {
	host.Guest = host.Exports{Alloc: alloc, Init: callInit, Process: callProcess,
		OnTimer: callOnTimer, OnTick: callOnTick, StateVersion: callStateVersion, Migrate: callMigrate}
}
