package modrt

import (
	"context"

	"github.com/wasmstream/wasmstream/abi"
)

// httpRequest serves http_request (ABI.md §4.14).
func (i *Instance) httpRequest(ctx context.Context, reqPtr, reqLen, bufPtr, bufCap uint32) int64 {
	return int64(abi.ErrNotAllowed)
}

// httpResponse serves http_response (ABI.md §4.15).
func (i *Instance) httpResponse(bufPtr, bufCap uint32) int64 {
	return int64(abi.ErrNotFound)
}
