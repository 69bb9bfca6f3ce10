//go:build !wasip1

package wasmstream

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The SDK stays TinyGo-compatible by construction: its non-test code (this package and
// internal/host) imports only the packages below and starts no goroutine. fmt, reflect and
// encoding/json in particular are kept out of guests.
func TestTinyGoFriendly(t *testing.T) {
	allowed := map[string]bool{
		"errors": true, "strconv": true, "unsafe": true, "time": true, "math": true, "unicode/utf8": true,
		"github.com/wasmstream/wasmstream/abi":                        true,
		"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host": true,
	}
	for _, dir := range []string{".", filepath.Join("internal", "host"), filepath.Join("..", "..", "abi")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if !allowed[p] {
					t.Errorf("%s imports %s", path, p)
				}
			}
			full, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(full, func(n ast.Node) bool {
				if _, ok := n.(*ast.GoStmt); ok {
					t.Errorf("%s starts a goroutine", path)
				}
				return true
			})
		}
	}
}
