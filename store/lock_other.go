//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package store

import "errors"

// lockHeld cannot probe Badger's directory lock on this platform; Open then
// reports a held lock as an ordinary open error.
func lockHeld(dir string, readOnly bool) bool { return false }

// tryLock cannot take Badger's directory lock on this platform.
func tryLock(dir string, readOnly bool) (unlock func(), held bool) { return func() {}, false }

// freeBytes cannot tell the free space on this platform; the disk-full check is off.
var freeBytes = func(dir string) (int64, error) { return 0, errors.ErrUnsupported }
