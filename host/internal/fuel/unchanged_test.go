package fuel

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

var update = flag.Bool("update", false, "rewrite testdata/instrumented.golden from this build")

// goldenFile holds, for every module TestInstrumentUnchanged meters, the SHA-256 of the module
// and of its instrumented bytes.
const goldenFile = "testdata/instrumented.golden"

// TestInstrumentUnchanged instruments every .wasm fixture the repository holds and every guest
// module its tests build (standard Go, Rust, and TinyGo for the guests `make test-tinygo`
// builds), and compares the SHA-256 of the output with testdata/instrumented.golden: a change
// of the rewriter that is meant to leave its output as it was (a refactoring) must leave every
// byte of it. A fixture whose own hash differs from the golden's fails (rerun with -update once
// the change is intended); a built module whose hash differs (another toolchain, a changed
// guest or SDK, or a Rust guest built in another clone: cargo hashes the path) is skipped with a note, since its output cannot be compared. Each fixture is also
// mutated at every byte (truncated there, and the byte inverted): the outputs and errors of the
// mutants hash to the golden's "<fixture>~mutants" line, so that the paths that refuse a module
// keep their errors too. What Declarations and LimitTables make of each module (and mutant) is
// compared the same way ("<module>~read"). `go test
// ./host/internal/fuel -run TestInstrumentUnchanged -update` rewrites the file (review its diff:
// a changed output line is a changed rewriter).
func TestInstrumentUnchanged(t *testing.T) {
	golden := readGolden(t)
	got := map[string][2]string{}
	check := func(t *testing.T, name, path string, fixture bool) {
		wasm, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Instrument(wasm, Options{Initial: 1 << 20, Stack: 1 << 10})
		out := "refused: " + fmt.Sprint(err)
		if err == nil {
			out = sum(res.Wasm)
		}
		in := sum(wasm)
		got[name] = [2]string{in, out}
		got[name+"~read"] = [2]string{in, readers(wasm)}
		want, ok := golden[name]
		if fixture {
			got[name+"~mutants"] = [2]string{in, mutants(wasm)}
		}
		switch {
		case *update:
		case !ok && fixture:
			t.Errorf("%s is not in %s: rerun with -update", name, goldenFile)
		case !ok || want[0] != in && !fixture:
			t.Skipf("%s was built differently from the module of %s (another toolchain, or a changed guest): its output cannot be compared; rerun with -update", name, goldenFile)
		case want[0] != in:
			t.Errorf("the fixture %s changed (sha256 %s, golden %s): rerun with -update", name, in, want[0])
		case want[1] != out:
			t.Errorf("%s: instrumented output %s, golden %s", name, out, want[1])
		case golden[name+"~read"] != got[name+"~read"]:
			t.Errorf("%s: Declarations and LimitTables hash to %s, golden %s", name, got[name+"~read"][1], golden[name+"~read"][1])
		case fixture && golden[name+"~mutants"] != got[name+"~mutants"]:
			t.Errorf("%s: the mutants' outputs and errors hash to %s, golden %s", name, got[name+"~mutants"][1], golden[name+"~mutants"][1])
		}
	}
	root := guestbuild.Root()
	fixtures, err := filepath.Glob(filepath.Join(root, "host", "internal", "modrt", "testdata", "*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(root, "e2e", "testdata", "*.wasm"))
	for _, path := range append(fixtures, more...) {
		name, _ := filepath.Rel(root, path)
		name = filepath.ToSlash(name)
		t.Run(name, func(t *testing.T) { check(t, name, path, true) })
	}
	goPkgs, crates := guests(t, root)
	for _, pkg := range goPkgs {
		t.Run("go/"+pkg, func(t *testing.T) { check(t, "go/"+pkg, guestbuild.Go(t, pkg), false) })
	}
	for _, crate := range crates {
		t.Run("rust/"+crate, func(t *testing.T) { check(t, "rust/"+crate, guestbuild.Rust(t, crate), false) })
	}
	for _, pkg := range []string{"wordcount", "sessions", "dedupe", "testguests/conform", "testguests/trapper"} {
		t.Run("tinygo/"+pkg, func(t *testing.T) {
			if !haveTinyGo() {
				t.Skip("TinyGo is not installed (make tinygo): the TinyGo guests are not compared")
			}
			check(t, "tinygo/"+pkg, guestbuild.TinyGo(t, pkg), false)
		})
	}
	if *update {
		writeGolden(t, golden, got)
	}
}

// mutants instruments wasm truncated at every byte and with every byte inverted in turn, and
// returns the SHA-256 of the outputs and error messages.
func mutants(wasm []byte) string {
	h := sha256.New()
	one := func(b []byte) {
		res, err := Instrument(b, Options{Initial: 1 << 20, Stack: 1 << 10})
		if err != nil {
			fmt.Fprintf(h, "error %v\n", err)
		} else {
			fmt.Fprintf(h, "ok %s\n", sum(res.Wasm))
		}
		fmt.Fprintf(h, "%s\n", readers(b))
	}
	b := make([]byte, len(wasm))
	for i := range wasm {
		one(wasm[:i])
		copy(b, wasm)
		b[i] ^= 0xff
		one(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readers returns the SHA-256 of what Declarations and LimitTables (at 10 and at 0 elements)
// make of wasm.
func readers(wasm []byte) string {
	h := sha256.New()
	d, err := Declarations(wasm)
	fmt.Fprintf(h, "%+v %v\n", d, err)
	for _, limit := range []uint32{10, 0} {
		b, err := LimitTables(wasm, limit)
		fmt.Fprintf(h, "%s %v\n", sum(b), err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// haveTinyGo reports whether guestbuild.TinyGoTool finds a tinygo command. TinyGo is not a
// plain dependency: without it the TinyGo guests are skipped, in CI too (where a missing tool
// fails a test that needs it; this one does not).
func haveTinyGo() bool {
	if os.Getenv(guestbuild.TinyGoEnv) != "" || guestbuild.DefaultTinyGo() != "" {
		return true
	}
	_, err := exec.LookPath("tinygo")
	return err == nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// guests lists the Go packages and Rust crates under examples/wasm and examples/wasm/testguests.
func guests(t *testing.T, root string) (goPkgs, crates []string) {
	base := filepath.Join(root, "examples", "wasm")
	for _, pattern := range []string{"*", "testguests/*"} {
		dirs, err := filepath.Glob(filepath.Join(base, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			rel, _ := filepath.Rel(base, d)
			rel = filepath.ToSlash(rel)
			if _, err := os.Stat(filepath.Join(d, "Cargo.toml")); err == nil {
				crates = append(crates, rel)
			} else if m, _ := filepath.Glob(filepath.Join(d, "*.go")); len(m) > 0 {
				goPkgs = append(goPkgs, rel)
			}
		}
	}
	return goPkgs, crates
}

// readGolden reads lines "name input-sha256 output" (output: a SHA-256 or "refused: error").
func readGolden(t *testing.T) map[string][2]string {
	golden := map[string][2]string{}
	f, err := os.Open(goldenFile)
	if os.IsNotExist(err) && *update {
		return golden
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.SplitN(line, " ", 3)
		if len(fields) != 3 {
			t.Fatalf("%s: malformed line %q", goldenFile, line)
		}
		golden[fields[0]] = [2]string{fields[1], fields[2]}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return golden
}

// writeGolden writes got, keeping the golden lines of modules this run skipped.
func writeGolden(t *testing.T, golden, got map[string][2]string) {
	for name, v := range got {
		golden[name] = v
	}
	names := make([]string, 0, len(golden))
	for name := range golden {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# TestInstrumentUnchanged: module, SHA-256 of the module, SHA-256 of its instrumented bytes.\n")
	for _, name := range names {
		fmt.Fprintf(&b, "%s %s %s\n", name, golden[name][0], golden[name][1])
	}
	if err := os.WriteFile(goldenFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
