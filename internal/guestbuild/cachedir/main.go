// Command cachedir prints the directory the tests' guest builds go to (guestbuild.Dir), for
// the Makefile's TinyGo target to build where the tests look.
package main

import (
	"fmt"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

func main() { fmt.Println(guestbuild.Dir()) }
