//go:build !wasip1

package main

import "syscall"

// sockAccept stands in for WASI's sock_accept outside wasm: there is no socket to accept.
func sockAccept(fd, flags int32, result *int32) int32 { return int32(syscall.EBADF) }
