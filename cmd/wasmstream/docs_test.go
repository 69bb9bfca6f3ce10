package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// markdownFiles lists the repository's Markdown files, relative to repoRoot, leaving out
// hidden directories and build outputs (.build, Rust's target).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(name, ".") || name == "target" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files under %s, want the repository's", len(files), repoRoot)
	}
	return files
}

var (
	// mdLink matches an inline link or image's target: [text](target) or [text](target "title").
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpan matches an inline code span, whose brackets are not links.
	codeSpan  = regexp.MustCompile("`[^`\n]*`")
	mdHeading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// slugDrop is what GitHub drops from a heading to make its anchor: everything but letters,
	// digits, '_', '-' and spaces.
	slugDrop = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	// linkText matches a link in a heading, whose anchor keeps only its text.
	linkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// outsideFences returns the lines of a Markdown document that are not in fenced code blocks,
// each with its line number.
func outsideFences(text string) (lines []string, numbers []int) {
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
			continue
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			continue
		case fence != "":
			continue
		}
		lines = append(lines, line)
		numbers = append(numbers, i+1)
	}
	return lines, numbers
}

// anchors returns the anchors GitHub gives a Markdown document's headings: lower case, without
// punctuation, spaces as '-', and "-1", "-2", … after a repeated one.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := outsideFences(text)
	for _, line := range lines {
		m := mdHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		h := strings.NewReplacer("`", "", "*", "").Replace(m[2])
		h = linkText.ReplaceAllString(h, "$1")
		s := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// TestMarkdownLinks checks every relative link of every Markdown file in the repository: the
// file or directory it names exists, and an #anchor into a Markdown file names one of its
// headings.
func TestMarkdownLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := cache[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cache[path] = anchors(string(b))
		return cache[path]
	}
	links := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		lines, numbers := outsideFences(string(b))
		for i, line := range lines {
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, "``"), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				dest := filepath.Join(repoRoot, file)
				if path != "" {
					dest = filepath.Join(repoRoot, filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link to %s: no such file or directory", file, numbers[i], target)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchorsOf(dest)[frag] {
					t.Errorf("%s:%d: link to %s: %s has no heading with the anchor #%s", file, numbers[i], target, filepath.ToSlash(strings.TrimPrefix(dest, repoRoot+string(filepath.Separator))), frag)
				}
			}
		}
	}
	if links < 50 {
		t.Errorf("checked %d relative links, want the repository's (more than 50)", links)
	}
}

// configReference is the configuration reference: it documents every key in a table row
// that starts with the key in backquotes.
var configReference = filepath.Join(repoRoot, "docs", "configuration.md")

// TestConfigReferenceDocumentsEveryKey checks that docs/configuration.md has a row for every
// configuration key (host.Config's and the CLI's own, as a file spells them, tasks[].name for
// a task's name), and no row for a key that does not exist.
func TestConfigReferenceDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile(configReference)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	keys := allKeys("", reflect.TypeFor[fileConfig]())
	var missing []string
	for _, k := range keys {
		if !documented[k] && !hasChildren(keys, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/configuration.md has no row for %v", missing)
	}
	for k := range documented {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/configuration.md documents %q, which is no configuration key", k)
		}
	}
}

// hasChildren reports whether key is a section of other keys (kafka, tasks[].inputs).
func hasChildren(keys []string, key string) bool {
	return slices.ContainsFunc(keys, func(k string) bool {
		return strings.HasPrefix(k, key+".") || strings.HasPrefix(k, key+"[].")
	})
}

// TestReadmeTasksAreTheScaffolds checks that the Go and Rust tasks README.md shows are the ones
// `wasmstream init go|rust mytask` writes, which TestInit builds, tests and runs: the README's
// code cannot go stale.
func TestReadmeTasksAreTheScaffolds(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := func(lang string) string {
		_, rest, ok := strings.Cut(string(b), "\n```"+lang+"\n")
		if !ok {
			t.Fatalf("README.md has no ```%s block", lang)
		}
		code, _, _ := strings.Cut(rest, "\n```\n")
		return code + "\n"
	}
	for _, c := range []struct{ lang, file, end string }{
		{"go", "main.go", ""},
		{"rust", "src/lib.rs", "wasmstream::export_task!(Counts);\n"},
	} {
		dir := t.TempDir()
		if _, err := scaffold(dir, scaffoldData{Lang: c.lang, Name: "mytask", Crate: "mytask", Rust: c.lang == "rust"}); err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(c.file)))
		if err != nil {
			t.Fatal(err)
		}
		want := string(src)
		if c.end != "" {
			i := strings.Index(want, c.end)
			if i < 0 {
				t.Fatalf("init %s's %s has no %q", c.lang, c.file, c.end)
			}
			want = want[:i+len(c.end)]
		}
		if got := block(c.lang); got != want {
			t.Errorf("README.md's %s task differs from the %s `wasmstream init %s mytask` writes:\n--- README\n%s--- init\n%s", c.lang, c.file, c.lang, got, want)
		}
	}
}
