// Package devkafka runs the development Kafka broker on its own: an in-process
// Kafka-protocol broker on a loopback port, for trying tasks out and for tests (`wasmstream dev
// --broker-only`). It is not a production broker: one node, no security, no replication.
//
// A host starts the same broker itself when its configuration enables kafka.embedded; this
// package is for a broker without a host.
package devkafka

import "github.com/wasmstream/wasmstream/host/internal/kafka"

// Config is a broker's configuration. The zero value is a broker on a free loopback port that
// keeps its records in memory.
type Config struct {
	Dir        string   // where records and group offsets are kept, so they survive a restart; "" keeps them in memory
	Port       int      // loopback port; 0 picks a free one
	Partitions int      // partitions of the topics it creates; 0 means 4
	Topics     []string // topics to create at start
}

// Broker is a running development broker.
type Broker struct{ b *kafka.DevBroker }

// Start starts a broker. Close stops it.
//
// With a Dir that a killed broker left (SIGKILL, a crash), Start ends the transactions the kill
// left without markers before it lets any client in, as a real broker's coordinator would: one
// killed while its commit markers were written is committed (its remaining markers and the group
// offsets it commits; CrashCommitted counts them), the others are aborted (their abort markers;
// CrashAborted). Without the markers, read_committed readers would also skip what the same
// transactional producer commits after the restart, or read half a transaction.
func Start(cfg Config) (*Broker, error) {
	b, err := kafka.StartDevBroker(kafka.DevBrokerConfig{Dir: cfg.Dir, Port: cfg.Port,
		Partitions: int32(cfg.Partitions), Topics: cfg.Topics})
	if err != nil {
		return nil, err
	}
	return &Broker{b: b}, nil
}

// Addrs are the broker's addresses (host:port), for Config.Kafka.Brokers or any Kafka client.
func (b *Broker) Addrs() []string { return b.b.Addrs() }

// CrashAborted says how many transactions (counted per partition) Start found left open by a
// kill and aborted.
func (b *Broker) CrashAborted() int { return b.crashEnded(false) }

// CrashCommitted says how many transactions Start found half committed by a kill and committed:
// counted per partition it wrote a COMMIT marker to, and once for each whose markers were all
// written but whose group offsets it committed.
func (b *Broker) CrashCommitted() int { return b.crashEnded(true) + b.b.CrashCompletedOffsets() }

func (b *Broker) crashEnded(committed bool) int {
	n := 0
	for _, t := range b.b.CrashEnded() {
		if t.Committed == committed {
			n++
		}
	}
	return n
}

// Close stops the broker.
func (b *Broker) Close() { b.b.Close() }
