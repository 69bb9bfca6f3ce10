package task

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file input read to its end whose path no longer holds what was read says how: before, a
// file truncated, rotated or removed while it was read ended the run in silence, with what was
// written after the change unread (the next run then refused the file, or read the replacement
// from the middle when its first bytes matched).
func TestChangedWhileRead(t *testing.T) {
	const content = "line one\nline two\nline three\n"
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, path string)
		want   string // "" for none
	}{
		{name: "unchanged", change: func(*testing.T, string) {}},
		{name: "grown", want: "", change: func(t *testing.T, path string) {
			writeFile(t, path, content+"line four\n") // the same file, written longer
		}},
		{name: "removed", want: "was removed or renamed while it was read", change: func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "rotated", want: "was replaced by another file while it was read", change: func(t *testing.T, path string) {
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, content+"more\n")
		}},
		{name: "truncated", want: "was truncated while it was read: it holds 9 bytes, 29 were read", change: func(t *testing.T, path string) {
			if err := os.Truncate(path, 9); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "truncated and written again", want: "was rewritten while it was read", change: func(t *testing.T, path string) {
			writeFile(t, path, "another first line, longer than what was read\n")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in.txt")
			writeFile(t, path, content)
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			start, err := readHead(f, printBytes)
			if err != nil {
				t.Fatal(err)
			}
			p := &filePrint{f: f, start: start}
			tt.change(t, path)
			got := p.changedWhileRead(path, int64(len(content)))
			if tt.want == "" && got != "" || tt.want != "" && !strings.HasPrefix(got, tt.want) {
				t.Errorf("changedWhileRead = %q, want %q", got, tt.want)
			}
		})
	}
	if got := (*filePrint)(nil).changedWhileRead("stdin", 5); got != "" {
		t.Errorf("no file: %q", got)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
