//go:build !linux

package store

import "errors"

// allocateFile cannot allocate a file's blocks on this platform.
func allocateFile(path string) error { return errors.ErrUnsupported }
