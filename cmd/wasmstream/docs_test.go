package main

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/wasmstream/wasmstream/host"
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

// operatingDoc is the operating manual: it documents every command, every metric and every
// status field.
var operatingDoc = filepath.Join(repoRoot, "docs", "operating.md")

// docSection returns the lines of the Markdown file's section under the "## "+title heading, up
// to the next heading of that level.
func docSection(t *testing.T, path, title string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", path, "## "+title)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return strings.Split(rest, "\n")
}

// tableCells returns the cells of a Markdown table row ("| a | b |"), or nil for another line.
// An escaped \| stays in its cell.
func tableCells(line string) []string {
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") || len(line) < 2 {
		return nil
	}
	cells := strings.Split(strings.ReplaceAll(line[1:len(line)-1], `\|`, "\x00"), "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(strings.ReplaceAll(c, "\x00", `\|`))
	}
	return cells
}

var backquoted = regexp.MustCompile("`([^`]+)`")

// TestOperatingDocumentsEveryCommand checks that docs/operating.md's "The commands" has a row
// for every command of the binary, naming each of its flags (in the row, or in the row of the
// set of flags the command's row names: "configuration flags", ...), and no row for a command
// or a flag that does not exist.
func TestOperatingDocumentsEveryCommand(t *testing.T) {
	lines := docSection(t, operatingDoc, "The commands")
	groups := map[string]string{} // "configuration flags" → its row
	rows := map[string]string{}   // "run" → its row
	for _, line := range lines {
		cells := tableCells(line)
		if len(cells) < 2 {
			continue
		}
		if g, ok := strings.CutPrefix(cells[0], "**"); ok {
			groups[strings.TrimSuffix(g, "**")] = cells[1]
			continue
		}
		if name, ok := strings.CutPrefix(cells[0], "`wasmstream "); ok {
			rows[strings.TrimSuffix(name, "`")] = cells[1]
		}
	}
	if len(groups) == 0 {
		t.Fatalf("docs/operating.md's \"The commands\" has no rows of flag sets (| **configuration flags** | ... |)")
	}
	root := newRootCommand(strings.NewReader(""), io.Discard, io.Discard)
	commands := map[string]bool{}
	for _, cmd := range root.Commands() {
		name := cmd.Name()
		if name == "help" || cmd.Hidden {
			continue
		}
		commands[name] = true
		row, ok := rows[name]
		if !ok {
			t.Errorf("docs/operating.md's \"The commands\" has no row for `wasmstream %s`", name)
			continue
		}
		flags := row
		for g, groupRow := range groups {
			if strings.Contains(row, g) {
				flags += " " + groupRow
			}
		}
		documented := map[string]bool{}
		for _, m := range backquoted.FindAllStringSubmatch(flags, -1) {
			documented[m[1]] = true
		}
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || f.Hidden {
				return
			}
			if !documented["--"+f.Name] {
				t.Errorf("docs/operating.md: the row of `wasmstream %s` names no `--%s` (nor a set of flags that has it)", name, f.Name)
			}
			if f.Shorthand != "" && !documented["-"+f.Shorthand] {
				t.Errorf("docs/operating.md: the row of `wasmstream %s` names no `-%s` for --%s", name, f.Shorthand, f.Name)
			}
		})
		// The row's own flags exist (a set's flags belong to the commands that name it).
		for _, m := range backquoted.FindAllStringSubmatch(row, -1) {
			flag, ok := strings.CutPrefix(m[1], "--")
			if ok && cmd.Flags().Lookup(flag) == nil {
				t.Errorf("docs/operating.md: the row of `wasmstream %s` names `%s`, which it does not have", name, m[1])
			}
		}
	}
	for name := range rows {
		if !commands[name] {
			t.Errorf("docs/operating.md documents `wasmstream %s`, which is no command", name)
		}
	}
	if len(commands) < 10 {
		t.Errorf("found %d commands, want the binary's", len(commands))
	}
}

// metricNames returns the names of the host's metrics, from statsCollector's descriptions.
func metricNames(t *testing.T) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 256)
	statsCollector{}.Describe(ch)
	close(ch)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		names = append(names, m[1])
	}
	if len(names) < 40 {
		t.Fatalf("found %d metrics, want the host's", len(names))
	}
	return names
}

// documentedMetrics returns the metric names of the rows of docs/operating.md's "Metrics"
// table. A row may name several: in full, or as a suffix of the one before it
// (`wasmstream_state_cache_hits_total`, `_misses_total`), which replaces as many of its last
// words.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, line := range docSection(t, operatingDoc, "Metrics") {
		cells := tableCells(line)
		if len(cells) < 2 {
			continue
		}
		prev := ""
		for _, m := range backquoted.FindAllStringSubmatch(cells[0], -1) {
			name := m[1]
			if suffix, ok := strings.CutPrefix(name, "_"); ok && prev != "" {
				words := strings.Split(prev, "_")
				n := len(strings.Split(suffix, "_"))
				name = strings.Join(words[:len(words)-n], "_") + "_" + suffix
			}
			if strings.HasPrefix(name, "wasmstream_") {
				names[name] = true
				prev = name
			}
		}
	}
	return names
}

// TestOperatingDocumentsEveryMetric checks that docs/operating.md's metrics table has a row for
// every metric the host exports, and none for a metric it does not (the guest metrics,
// wasmstream_guest_<name>, are the module's).
func TestOperatingDocumentsEveryMetric(t *testing.T) {
	documented := documentedMetrics(t)
	exported := map[string]bool{}
	for _, name := range metricNames(t) {
		exported[name] = true
		if !documented[name] {
			t.Errorf("docs/operating.md's metrics table has no row for %s", name)
		}
	}
	for name := range documented {
		if !exported[name] && name != "wasmstream_guest_" {
			t.Errorf("docs/operating.md's metrics table documents %s, which the host does not export", name)
		}
	}
}

// TestOperatingDocumentsEveryStatusField checks that docs/operating.md's "The status" has a
// row for every field of the status JSON (host.TaskStats and host.InputStats), and no row for
// a field there is not.
func TestOperatingDocumentsEveryStatusField(t *testing.T) {
	documented := map[string]bool{}
	for _, line := range docSection(t, operatingDoc, "The status") {
		if cells := tableCells(line); len(cells) >= 2 {
			for _, m := range backquoted.FindAllStringSubmatch(cells[0], -1) {
				documented[m[1]] = true
			}
		}
	}
	fields := map[string]bool{}
	for _, typ := range []reflect.Type{reflect.TypeFor[host.TaskStats](), reflect.TypeFor[host.InputStats]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = true
			if !documented[name] {
				t.Errorf("docs/operating.md's \"The status\" has no row for %s's field %q", typ.Name(), name)
			}
		}
	}
	for name := range documented {
		if !fields[name] {
			t.Errorf("docs/operating.md's \"The status\" documents %q, which is no status field", name)
		}
	}
}

// TestRepositoryLayoutNamesEveryDirectory checks that docs/README.md's "Repository layout"
// names every top-level directory and every package directory under host/ and internal/
// (a row's first cell may name siblings after a path: `host/internal/statecache`, `source`).
func TestRepositoryLayoutNamesEveryDirectory(t *testing.T) {
	named := map[string]bool{}
	for _, line := range docSection(t, filepath.Join(repoRoot, "docs", "README.md"), "Repository layout") {
		cells := tableCells(line)
		if len(cells) < 2 {
			continue
		}
		parent := ""
		for _, m := range backquoted.FindAllStringSubmatch(cells[0], -1) {
			p := strings.TrimSuffix(m[1], "/")
			if strings.Contains(p, "/") || parent == "" {
				parent = filepath.ToSlash(filepath.Dir(p))
			} else if parent != "." {
				p = parent + "/" + p
			}
			named[p] = true
		}
	}
	var dirs []string
	for _, pattern := range []string{"*", "host/*", "host/internal/*", "internal/*"} {
		matches, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(pattern)))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(repoRoot, m)
			rel = filepath.ToSlash(rel)
			fi, err := os.Stat(m)
			if err != nil || !fi.IsDir() || strings.HasPrefix(filepath.Base(rel), ".") || rel == "host/internal" || !holdsSource(m) {
				continue
			}
			dirs = append(dirs, rel)
		}
	}
	if len(dirs) < 20 {
		t.Fatalf("found %d directories, want the repository's", len(dirs))
	}
	for _, d := range dirs {
		// A directory is named by its path, or by the paths of directories in it
		// (guest-sdk/go, examples/wasm).
		if !named[d] && !slices.ContainsFunc(slices.Collect(maps.Keys(named)), func(p string) bool { return strings.HasPrefix(p, d+"/") }) {
			t.Errorf("docs/README.md's \"Repository layout\" has no row for %s/", d)
		}
	}
	for p := range named {
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(p))); err != nil {
			t.Errorf("docs/README.md's \"Repository layout\" names %s, which does not exist", p)
		}
	}
}

// holdsSource reports whether dir holds Go, Rust or Markdown files, at any depth: a directory of
// the repository's, not one a build or a run left (bin, data).
func holdsSource(dir string) bool {
	found := errors.New("found")
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "target") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), ".rs") || strings.HasSuffix(d.Name(), ".md")) {
			return found
		}
		return nil
	})
	return err == found
}

// TestDocsYAMLIsConfiguration decodes every YAML block of the repository's Markdown as a
// configuration: a key a page shows must exist, with a value of its type. A block of a task's
// keys (inputs, grants, ...) is decoded as a task; a block of neither (a Kubernetes probe) is
// not a configuration and is left alone.
func TestDocsYAMLIsConfiguration(t *testing.T) {
	top, task := map[string]bool{}, map[string]bool{}
	for _, k := range allKeys("", reflect.TypeFor[fileConfig]()) {
		if rest, ok := strings.CutPrefix(k, "tasks[]."); ok {
			task[strings.FieldsFunc(rest, func(r rune) bool { return r == '.' || r == '[' })[0]] = true
		}
		top[strings.FieldsFunc(k, func(r rune) bool { return r == '.' || r == '[' })[0]] = true
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		blocks := strings.Split(string(b), "```yaml\n")
		for i, rest := range blocks[1:] {
			block, _, _ := strings.Cut(rest, "```")
			var doc map[string]any
			if err := yaml.Unmarshal([]byte(dedent(block)), &doc); err != nil {
				t.Errorf("%s: YAML block %d: %v", file, i+1, err)
				continue
			}
			isTop, isTask := 0, 0
			for k := range doc {
				if top[k] {
					isTop++
				}
				if task[k] {
					isTask++
				}
			}
			data := []byte(block)
			switch {
			case isTop == 0 && isTask == 0:
				continue
			case isTask > isTop:
				data, err = yaml.Marshal(map[string]any{"tasks": []any{doc}})
				if err != nil {
					t.Fatal(err)
				}
			}
			checked++
			if _, err := loadConfig(data, "", nil); err != nil {
				t.Errorf("%s: YAML block %d is no valid configuration: %v\n%s", file, i+1, err, block)
			}
		}
	}
	if checked < 5 {
		t.Errorf("checked %d configuration blocks, want the repository's", checked)
	}
}

// dedent removes the indentation every non-blank line of s shares.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// docCommand matches a command line in the Markdown: wasmstream, a command and its arguments up
// to the end of the line, a pipe, a ; or &&, a comment or the end of a code span.
var docCommand = regexp.MustCompile(`\bwasmstream ([a-z]+)((?:[ \t]+[^\s|;&#` + "`" + `]+)*)`)

// TestDocsCommandsUseRealFlags checks every wasmstream command line the repository's Markdown
// shows (in code blocks and code spans): each flag it passes is one the command has, so a page
// cannot teach a flag that was renamed or removed.
func TestDocsCommandsUseRealFlags(t *testing.T) {
	root := newRootCommand(strings.NewReader(""), io.Discard, io.Discard)
	flags := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			for _, m := range docCommand.FindAllStringSubmatch(line, -1) {
				cmd, _, err := root.Find([]string{m[1]})
				if err != nil || cmd == root {
					continue // "wasmstream runs ...": prose, not a command
				}
				for _, tok := range strings.Fields(m[2]) {
					tok = strings.TrimRight(tok, ".,:)")
					var ok bool
					switch {
					case tok == "--" || !strings.HasPrefix(tok, "-") || len(tok) < 2 || tok[1] >= '0' && tok[1] <= '9':
						continue
					case strings.HasPrefix(tok, "--"):
						name, _, _ := strings.Cut(tok[2:], "=")
						ok = cmd.Flags().Lookup(name) != nil || name == "help"
					default:
						ok = len(tok) == 2 && (cmd.Flags().ShorthandLookup(tok[1:]) != nil || tok == "-h")
					}
					flags++
					if !ok {
						t.Errorf("%s:%d: `wasmstream %s` has no flag %s: %s", file, n+1, m[1], tok, strings.TrimSpace(line))
					}
				}
			}
		}
	}
	if flags < 100 {
		t.Errorf("checked %d flags of wasmstream command lines, want the repository's (more than 100)", flags)
	}
}

// TestConfigReferenceListsTheOverrides checks docs/configuration.md's table of the keys the
// environment and flags override against the CLI's list (overrides): the same keys, each with
// its variable and its flag (or none).
func TestConfigReferenceListsTheOverrides(t *testing.T) {
	b, err := os.ReadFile(configReference)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if cells := tableCells(line); len(cells) == 3 && strings.Contains(cells[1], "`WASMSTREAM_") {
			rows[cells[0]] = cells[1:]
		}
	}
	for _, o := range overrides {
		row, ok := rows[o.key]
		if !ok {
			t.Errorf("docs/configuration.md's overrides table has no row for %s", o.key)
			continue
		}
		delete(rows, o.key)
		if want := "`" + envName(o.key) + "`"; row[0] != want {
			t.Errorf("docs/configuration.md: %s's variable is %s, want %s", o.key, row[0], want)
		}
		want := "none"
		if o.flag != "" {
			want = "`--" + o.flag + "`"
		}
		if !strings.HasPrefix(row[1], want) {
			t.Errorf("docs/configuration.md: %s's flag is %q, want %s", o.key, row[1], want)
		}
	}
	for key := range rows {
		t.Errorf("docs/configuration.md's overrides table lists %s, which the environment and flags do not override", key)
	}
}

// TestOperatingDocumentsEveryEndpoint checks that docs/operating.md's endpoints table has a row
// for every route the admin API registers (read from its source: the package is the host's
// own), and none for a route it does not.
func TestOperatingDocumentsEveryEndpoint(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "host", "internal", "admin", "admin.go"))
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	for _, m := range regexp.MustCompile(`mux\.Handle(?:Func)?\("((?:GET|POST) /[^"]*)"`).FindAllStringSubmatch(string(src), -1) {
		routes[regexp.MustCompile(`\{([a-z]+)\}`).ReplaceAllString(m[1], "<$1>")] = true
	}
	if len(routes) < 10 {
		t.Fatalf("found %d routes in the admin API's source, want its routes", len(routes))
	}
	documented := map[string]bool{}
	for _, line := range docSection(t, operatingDoc, "Endpoints") {
		cells := tableCells(line)
		if len(cells) < 2 {
			continue
		}
		for _, m := range backquoted.FindAllStringSubmatch(cells[0], -1) {
			route, _, _ := strings.Cut(m[1], "?")
			route, _, _ = strings.Cut(route, "[")
			documented[route] = true
		}
	}
	for r := range routes {
		if !documented[r] {
			t.Errorf("docs/operating.md's endpoints table has no row for %s", r)
		}
	}
	for r := range documented {
		if strings.HasPrefix(r, "GET /v1/") || strings.HasPrefix(r, "POST /v1/") {
			if !routes[r] {
				t.Errorf("docs/operating.md's endpoints table documents %s, which the admin API does not serve", r)
			}
		}
	}
}
