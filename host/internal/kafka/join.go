package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An exactly-once consumer takes no records while its group joins and syncs. franz-go holds a
// transaction's offset commit (GroupTransactSession.End) until the group's join and sync are
// over, and a join waits for every member (a slow one, one long in its revoke) up to
// kafka.rebalance_timeout: a transaction that took records during the join waited that long
// to end, and one that outlasted kafka.transaction_timeout was aborted by the broker, which
// fenced the producer (the task halted). A transaction only has something to commit (and the
// broker a timeout to count) once it polled records or produced, and waits for a join only
// with input offsets to commit (franz-go's offset commit carries only the partitions polled
// since the last one); so while the group joins and syncs, the consumer's topics are paused:
// the polls return nothing, the transaction of the moment commits no offsets and ends without
// waiting (what the task produced on its own meanwhile, a timer's outputs, included), and
// reading goes on once the member synced.
//
// The window begins at the end of the group session (the revoke callback that every session
// ends with, before the client sends its JoinGroup, and before a poll can take records since a
// rebalance callback goes before polls) or at the latest when the client builds its JoinGroup
// request (joinWatch.JoinGroupMetadata: a session-end revoke that GroupTransactSession does not
// pass on, after a revoke in the same transaction, which then aborts anyway without waiting),
// and ends once the sync's assignment is parsed (joinWatch.ParseSyncAssignment). A join or sync
// that fails keeps the topics paused until a later sync succeeds: the client cannot commit
// offsets without one.

// joinWatch wraps a balancer of an exactly-once consumer to tell it when its group joins and
// when it synced.
type joinWatch struct {
	kgo.GroupBalancer
	c *Consumer
}

func (b joinWatch) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	b.c.joining(true)
	return b.GroupBalancer.JoinGroupMetadata(interests, current, generation)
}

func (b joinWatch) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	assigned, err := b.GroupBalancer.ParseSyncAssignment(assignment)
	if err == nil {
		b.c.joining(false)
	}
	return assigned, err
}

// watchJoins wraps the balancers in joinWatch for a transactional consumer (txn).
func (c *Consumer) watchJoins(txn bool, bs []kgo.GroupBalancer) []kgo.GroupBalancer {
	if !txn {
		return bs
	}
	for i, b := range bs {
		bs[i] = joinWatch{GroupBalancer: b, c: c}
	}
	return bs
}

// joining pauses the consumer's topics as its group begins to join (on), and resumes them once
// it synced. Safe from any goroutine; a no-op when nothing changes.
func (c *Consumer) joining(on bool) {
	<-c.ready
	c.joinMu.Lock()
	defer c.joinMu.Unlock()
	if on == !c.joinedAt.IsZero() {
		return
	}
	if on {
		c.joinedAt = time.Now()
		c.cl.PauseFetchTopics(c.topics...)
		return
	}
	took := time.Since(c.joinedAt)
	c.joinedAt = time.Time{}
	c.cl.ResumeFetchTopics(c.topics...)
	if c.log != nil {
		c.log.Info("kafka: the group synced; reading again (exactly once: no records are taken while the group joins and syncs)",
			"group", c.group, "join_and_sync", took.Round(time.Millisecond))
	}
}
