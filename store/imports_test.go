package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const badgerPath = "github.com/dgraph-io/badger/v4"

// badgerMmap is Badger's own memory-mapped file type, which opening a table
// for verification (checkFiles) needs.
const badgerMmap = "github.com/dgraph-io/ristretto/v2/z"

// parsePackage parses the package's non-test sources.
func parsePackage(t *testing.T) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) < 3 {
		t.Fatalf("found only %d source files", len(files))
	}
	return files
}

// TestImportsLeaf checks that store is a leaf: it imports only the standard
// library and Badger.
func TestImportsLeaf(t *testing.T) {
	for _, f := range parsePackage(t) {
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") && path != badgerPath && path != badgerMmap && !strings.HasPrefix(path, badgerPath+"/") {
				t.Errorf("%s imports %q: store may import only the standard library and Badger (with its mmap package)", f.Name.Name, path)
			}
		}
	}
}

// TestNoBadgerInAPI checks that no exported function, method, type or struct
// field mentions a Badger type.
func TestNoBadgerInAPI(t *testing.T) {
	mentionsBadger := func(n ast.Node) bool {
		found := false
		ast.Inspect(n, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "badger" {
					found = true
				}
			}
			return !found
		})
		return found
	}
	checked := 0
	for _, f := range parsePackage(t) {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if id, ok := recv.(*ast.Ident); !ok || !id.IsExported() {
						continue
					}
				}
				checked++
				if mentionsBadger(d.Type) {
					t.Errorf("exported func %s mentions a Badger type", d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						checked++
						st, ok := s.Type.(*ast.StructType)
						if !ok {
							if mentionsBadger(s.Type) {
								t.Errorf("exported type %s mentions a Badger type", s.Name.Name)
							}
							continue
						}
						for _, field := range st.Fields.List {
							exported := len(field.Names) == 0 // embedded
							for _, name := range field.Names {
								exported = exported || name.IsExported()
							}
							if exported && mentionsBadger(field.Type) {
								t.Errorf("exported field of %s mentions a Badger type", s.Name.Name)
							}
						}
					case *ast.ValueSpec:
						for _, name := range s.Names {
							if name.IsExported() && s.Type != nil && mentionsBadger(s.Type) {
								t.Errorf("exported %s has a Badger type", name.Name)
							}
						}
					}
				}
			}
		}
	}
	if checked < 15 {
		t.Errorf("checked only %d exported declarations; the parser walk is broken", checked)
	}
}
