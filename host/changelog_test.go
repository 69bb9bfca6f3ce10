package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// runUntil runs a host with a changelog over data dir until want outputs were produced in
// total, stops it cleanly and returns its figures.
func runChangelogHost(t *testing.T, c *kfake.Cluster, module, dir string, outputs int) host.TaskStats {
	t.Helper()
	tc := wordcountKafkaTask(module)
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	h, err := host.New(host.Config{
		DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{tc},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	consumeOutputs(t, c, "counts", outputs, 60*time.Second)
	// Wait for a checkpoint after the last output, so the figures include it.
	time.Sleep(300 * time.Millisecond)
	st := h.Stats()[0]
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return st
}

// TestChangelogRestore moves a task's partitions between two hosts with separate disks through
// the changelog: a host with an empty disk restores everything and continues exactly; the first
// host, which kept its disk, later restores only the tail the other host wrote.
func TestChangelogRestore(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := map[string]map[string]int{}
	total := 0
	add := func(more map[string]map[string]int) {
		for u, ws := range more {
			if want[u] == nil {
				want[u] = map[string]int{}
			}
			for w, n := range ws {
				want[u][w] += n
				total += n
			}
		}
	}
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")

	add(produceWords(t, newClient(t, c), "words", 3000, 50, 1))
	a1 := runChangelogHost(t, c, module, dirA, total)
	sameCounts(t, want, stateOf(t, dirA, "wc"))
	if a1.ChangelogRecords == 0 {
		t.Fatal("host a produced no changelog records")
	}

	// Host b, empty disk: all four partitions restored in full, then the new records on top.
	add(produceWords(t, newClient(t, c), "words", 1000, 50, 2))
	b := runChangelogHost(t, c, module, dirB, total)
	sameCounts(t, want, stateOf(t, dirB, "wc"))
	if b.Restores != 4 || b.RestoredRecords == 0 {
		t.Fatalf("host b: %d restores of %d records, want 4 partitions restored", b.Restores, b.RestoredRecords)
	}

	// Host a again, with its disk: it lacks only what b wrote.
	add(produceWords(t, newClient(t, c), "words", 500, 50, 3))
	a2 := runChangelogHost(t, c, module, dirA, total)
	sameCounts(t, want, stateOf(t, dirA, "wc"))
	if a2.Restores != 4 {
		t.Fatalf("host a: %d restores, want 4", a2.Restores)
	}
	if a2.RestoredRecords == 0 || a2.RestoredRecords >= b.RestoredRecords+b.ChangelogRecords {
		t.Errorf("host a read %d changelog records; it lacks only what b wrote (%d snapshots), not the %d a full restore reads",
			a2.RestoredRecords, b.ChangelogRecords, b.RestoredRecords+b.ChangelogRecords)
	}
	t.Logf("changelog: a wrote %d snapshots; b restored %d records (full) and wrote %d; a restored %d (tail)",
		a1.ChangelogRecords, b.RestoredRecords, b.ChangelogRecords, a2.RestoredRecords)
}
