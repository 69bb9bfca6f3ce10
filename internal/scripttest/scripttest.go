// Package scripttest is the golden-script harness shared by the tests of several packages
// (host/internal/positions, host/internal/sched). Only tests may import it.
//
// A script is a sequence of blocks in the style of etcd-raft's datadriven tests:
//
//	# comments and blank lines between blocks are kept
//	command arg arg
//	----
//	expected output, up to the next blank line (which ends the block)
//
// A block without a "----" line expects no output. With -update the expected output is
// rewritten from what the commands print.
package scripttest

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata scripts")

type block struct {
	pre  []string // comment and blank lines before the command
	line int      // line number of the command
	cmd  string
	want string
}

func parseScript(t *testing.T, path string) (blocks []block, tail []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := block{pre: pre, line: i + 1, cmd: strings.TrimSpace(l)}
		pre = nil
		if i+1 < len(lines) && lines[i+1] == "----" {
			i += 2
			var out []string
			for ; i < len(lines) && lines[i] != ""; i++ {
				out = append(out, lines[i])
			}
			b.want = strings.Join(out, "\n")
		}
		blocks = append(blocks, b)
	}
	return blocks, pre
}

// Run runs every testdata/*.txt file (relative to the working directory, which for a test is
// its package's directory) as a subtest; run is called once per file, with the subtest, and
// returns the command interpreter for that file.
func Run(t *testing.T, run func(t *testing.T) func(cmd string, args []string) string) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no scripts under testdata")
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			blocks, tail := parseScript(t, path)
			do := run(t)
			var w strings.Builder
			// An output ends at a blank line; write one unless the next line already is.
			blank := false
			lines := func(ls []string) {
				if blank && (len(ls) == 0 || ls[0] != "") {
					w.WriteString("\n")
				}
				blank = false
				for _, l := range ls {
					w.WriteString(l + "\n")
				}
			}
			for _, b := range blocks {
				f := strings.Fields(b.cmd)
				got := strings.TrimRight(do(f[0], f[1:]), "\n")
				if !*update && got != b.want {
					t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, b.line, b.cmd, got, b.want)
				}
				lines(append(b.pre, b.cmd))
				if got != "" {
					w.WriteString("----\n" + got + "\n")
					blank = true
				}
			}
			if len(tail) > 0 {
				lines(tail)
			}
			if *update {
				if err := os.WriteFile(path, []byte(w.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
