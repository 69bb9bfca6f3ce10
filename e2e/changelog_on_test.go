package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaChangelogTurnedOnPublishes: the binary runs a Kafka wordcount without the changelog,
// then with `changelog: {enabled: true}` over the same data directory, then with the
// changelog on an empty data directory (a lost disk, or the partitions' next owner): that last
// host restores every count of the first run from the changelog. Before, the second run
// published nothing (a key went to the changelog only when it next changed), and the empty
// directory restored no state at all.
func TestKafkaChangelogTurnedOnPublishes(t *testing.T) {
	t.Parallel() // on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "counts")
	module := guestbuild.Go(t, "wordcount")
	want := r.produceWords(300, time.Time{}, 7)
	without := r.wordcountYAML(module, "at_least_once", "")
	with := without + "    changelog:\n      enabled: true\n"

	r.writeConfig(without)
	h := r.start()
	consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	h.stop(t)

	// assigned waits until the host assigned (and restored) the four partitions.
	assigned := func(h *hostRun) {
		t.Helper()
		hosttest.WaitFor(t, 2*time.Minute, "the four partitions assigned", func() bool {
			select {
			case err := <-h.done:
				h.done <- err
				t.Fatalf("the host exited (%v); its log:\n%s", err, tail(h.logs.String(), 8000))
			default:
			}
			return strings.Count(h.logs.String(), `msg="partition assigned"`) >= 4
		})
	}
	r.writeConfig(with)
	h = r.start()
	assigned(h)
	h.stop(t)
	if n := strings.Count(h.logs.String(), "partition state published to the changelog"); n == 0 {
		t.Errorf("the run with the changelog turned on published no partition; its log:\n%s", tail(h.logs.String(), 8000))
	}

	empty := filepath.Join(r.dir, "empty")
	r.writeConfig(strings.Replace(with, filepath.Join(r.dir, "data"), empty, 1))
	h = r.start()
	assigned(h)
	h.stop(t)
	if diffs := diffState(want, readState(t, empty, "wc")); len(diffs) > 0 {
		t.Errorf("a host on an empty data directory restored from the changelog %d counts unlike the first run's, e.g. %s",
			len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
}
