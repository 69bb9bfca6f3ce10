package kafka

import (
	"testing"
)

// A restart on the directory of an earlier run creates the topics the earlier run did not have:
// kfake seeds its topics only into an empty directory, so a topic added to the configuration (or
// a --topic added to `dev --broker-only`) after the first run was missing, while the start line
// named it (a producer then failed with UNKNOWN_TOPIC_OR_PARTITION, a consumer read nothing).
func TestDevBrokerRestartCreatesNewTopics(t *testing.T) {
	dir := t.TempDir()
	b, err := StartDevBroker(DevBrokerConfig{Dir: dir, Partitions: 2, Topics: []string{"in"}})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	b, err = StartDevBroker(DevBrokerConfig{Dir: dir, Partitions: 3, Topics: []string{"in", "out"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for topic, want := range map[string]int{"in": 2, "out": 3} { // "in" keeps its partitions
		// Asked of the cluster itself: a metadata request could create a missing topic.
		if n := len(b.c.PartitionInfos(topic)); n != want {
			t.Errorf("topic %s has %d partitions after the restart, want %d", topic, n, want)
		}
	}
}
