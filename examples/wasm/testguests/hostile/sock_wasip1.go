package main

import "unsafe"

//go:wasmimport wasi_snapshot_preview1 sock_accept
func wasiSockAccept(fd int32, flags int32, resultFd uint32) int32

// sockAccept calls WASI's sock_accept and returns its errno.
func sockAccept(fd, flags int32, result *int32) int32 {
	return wasiSockAccept(fd, flags, uint32(uintptr(unsafe.Pointer(result))))
}
