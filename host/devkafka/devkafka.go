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
// With a Dir that a killed broker left (SIGKILL, a crash), the transactions open at the kill are
// aborted, as a real broker's coordinator would, and Start writes their abort markers before it
// lets any client in; CrashAborted lists them. Without the markers, read_committed readers would
// also skip what the same transactional producer commits after the restart.
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

// CrashAborted says how many transactions Start found left open by a kill and aborted.
func (b *Broker) CrashAborted() int { return len(b.b.CrashAborted()) }

// Close stops the broker.
func (b *Broker) Close() { b.b.Close() }
