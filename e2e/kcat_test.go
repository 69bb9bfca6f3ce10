package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestKcatInterop drives `wasmstream dev` (the embedded broker with the wordcount task) with
// kcat, a third-party Kafka client: kcat produces the input and consumes the outputs; in
// exactly-once mode it reads them with isolation.level=read_committed, as docs/kafka.md says.
func TestKcatInterop(t *testing.T) {
	for _, delivery := range []string{"at_least_once", "exactly_once"} {
		t.Run(delivery, func(t *testing.T) { kcatInterop(t, delivery) })
	}
}

func kcatInterop(t *testing.T, delivery string) {
	kcat := guestbuild.Tool(t, "kcat")
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	port := freePort(t)
	brokers := "127.0.0.1:" + strconv.Itoa(port)
	cfg := filepath.Join(dir, "dev.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
kafka:
  embedded:
    port: %d
tasks:
  - name: wordcount
    module: %s
    config: {min_len: 2}
    inputs:
      - name: words
        type: kafka
        topics: [words]
    output:
      type: kafka
      topic: counts
    changelog:
      enabled: %t
    delivery: %s
`, filepath.Join(dir, "data"), port, module, delivery == "exactly_once", delivery)), 0o644)
	dev := exec.Command(bin, "dev", "-c", cfg)
	stderr, err := dev.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		dev.Process.Signal(syscall.SIGINT)
		dev.Wait()
	}()
	// Wait until the task has its partitions.
	sc := bufio.NewScanner(stderr)
	assigned := 0
	var logs []string
	for assigned < 4 && sc.Scan() {
		logs = append(logs, sc.Text())
		if strings.Contains(sc.Text(), "partition assigned") {
			assigned++
		}
	}
	if assigned < 4 {
		t.Fatalf("the dev host did not get its partitions:\n%s", strings.Join(logs, "\n"))
	}
	go func() {
		for sc.Scan() {
		}
	}()

	input := "alice:Hello world\nbob:hello there\nalice:hello again, world\n"
	produce := exec.Command(kcat, "-b", brokers, "-P", "-t", "words", "-K:", "-X", "partitioner=murmur2_random")
	produce.Stdin = strings.NewReader(input)
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	want := []string{"alice again 1", "alice hello 1", "alice hello 2", "alice world 1", "alice world 2", "bob hello 1", "bob there 1"}
	var got []string
	deadline := time.Now().Add(2 * time.Minute) // a failure bound: the binary joins its group first
	for len(got) < len(want) && time.Now().Before(deadline) {
		args := []string{"-b", brokers, "-C", "-t", "counts", "-e", "-q", "-f", "%k %s\n"}
		if delivery == "exactly_once" {
			args = append(args, "-X", "isolation.level=read_committed")
		}
		consume := exec.Command(kcat, args...)
		out, err := consume.Output()
		if err != nil {
			t.Fatalf("kcat consume: %v", err)
		}
		got = strings.Fields(strings.TrimSpace(string(out)))
		got = regroup(got)
		if len(got) < len(want) {
			time.Sleep(200 * time.Millisecond)
		}
	}
	sort.Strings(got)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("kcat consumed %q, want %q", got, want)
	}
}

// regroup turns kcat's "%k %s" fields back into "key word count" lines.
func regroup(fields []string) []string {
	var out []string
	for i := 0; i+2 < len(fields); i += 3 {
		out = append(out, strings.Join(fields[i:i+3], " "))
	}
	return out
}
