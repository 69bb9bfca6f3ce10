//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package store

import (
	"errors"
	"os"
	"syscall"
)

// lockHeld reports whether another user holds the lock that Badger takes on
// dir: an flock on the directory, exclusive for a writer and shared for a
// reader. Open calls it after Badger failed, to tell "locked" from other
// failures without parsing Badger's message.
func lockHeld(dir string, readOnly bool) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	how := syscall.LOCK_EX
	if readOnly {
		how = syscall.LOCK_SH
	}
	err = syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}

// tryLock takes the lock Badger takes on dir, without waiting, so that
// Open's checks of the files run while no other user changes them. It returns
// held if another user holds it, and otherwise a function that releases it
// (Badger then takes its own). A missing dir is not locked.
func tryLock(dir string, readOnly bool) (unlock func(), held bool) {
	f, err := os.Open(dir)
	if err != nil {
		return func() {}, false
	}
	how := syscall.LOCK_EX
	if readOnly {
		how = syscall.LOCK_SH
	}
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
		f.Close()
		return func() {}, errors.Is(err, syscall.EWOULDBLOCK)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, false
}

// freeBytes returns the bytes available to an unprivileged user on dir's file system.
var freeBytes = func(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
