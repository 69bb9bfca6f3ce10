//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package store

// lockHeld cannot probe Badger's directory lock on this platform; Open then
// reports a held lock as an ordinary open error.
func lockHeld(dir string, readOnly bool) bool { return false }
