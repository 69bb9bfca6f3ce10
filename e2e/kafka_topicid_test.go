package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestKafkaRecreatedTopicByID: the input topic is deleted and recreated while the host is down,
// and the new topic already holds more records on every partition than the task had processed of
// the old one. Its end offsets cannot tell it from the old topic; its id can: the task halts at
// the restart, saying the topic's id changed, instead of resuming the new topic at the old
// positions and skipping its first records. Before, the host read on from there without a word.
func TestKafkaRecreatedTopicByID(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "counts")
	want := r.produceWords(200, time.Time{}, 21)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once", ""))
	h := r.start()
	consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	h.stop(t)

	resp, err := kadm.NewClient(r.cl).DeleteTopics(context.Background(), "words")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("deleting words: %v", err)
	}
	r.createTopic("words")
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers)) // the rig's client knows the old topic's id
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r.cl = cl
	r.produceWords(4000, time.Time{}, 22) // ~1000 a partition, against ~50 processed of the old

	h = r.start()
	log := h.awaitHalt(t, 2*time.Minute)
	if !strings.Contains(log, "the topic's id changed") || !strings.Contains(log, "the topic was deleted and recreated") {
		t.Fatalf("the halt does not say the topic's id changed; the log:\n%s", tail(log, 8000))
	}
}
