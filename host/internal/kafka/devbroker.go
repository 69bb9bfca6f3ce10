package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// DevBroker is the embedded development broker: an in-process Kafka-protocol cluster
// (franz-go's kfake) on loopback, with its data kept in a directory across restarts.
type DevBroker struct {
	c       *kfake.Cluster
	crashed []CrashAbortedTxn
}

// DevBrokerConfig configures the development broker.
type DevBrokerConfig struct {
	Dir        string   // where records and group offsets are kept; "" keeps them in memory
	Port       int      // loopback port; 0 picks one
	Partitions int32    // partitions of the topics it creates; default 4
	Topics     []string // topics to create
}

// StartDevBroker starts the broker. Close stops it. With a Dir that a killed broker left, it
// first ends with an abort marker every transaction that the kill left open (CrashAborted), before
// it lets any client in.
func StartDevBroker(cfg DevBrokerConfig) (*DevBroker, error) {
	if cfg.Partitions <= 0 {
		cfg.Partitions = 4
	}
	var gate *gatedListener // with a Dir: clients wait until crash-aborted transactions are ended
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(cfg.Port),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(cfg.Partitions)),
		// Development groups may use short sessions, so that a killed member's partitions move
		// within seconds (a real cluster's minimum is 6 s).
		kfake.GroupMinSessionTimeout(time.Second),
	}
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("kafka: dev broker: %w", err)
		}
		// Written through the page cache, as a real broker does by default: a killed broker
		// process loses nothing, a power loss may.
		opts = append(opts, kfake.DataDir(cfg.Dir))
		opts = append(opts, kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			gate = newGatedListener(ln)
			return gate, nil
		}))
	}
	if len(cfg.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(cfg.Partitions, cfg.Topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: dev broker: %w", err)
	}
	b := &DevBroker{c: c}
	// kfake seeds its topics only into an empty directory: on a restart over an earlier run's,
	// the topics that run did not have (a task or a --topic added since) are created here.
	for _, t := range cfg.Topics {
		if c.TopicInfo(t) != nil {
			continue
		}
		if err := c.CreateTopic(t, cfg.Partitions, nil); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			c.Close()
			return nil, fmt.Errorf("kafka: dev broker: creating topic %q: %w", t, err)
		}
	}
	if gate != nil {
		ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
		b.crashed, err = endCrashedTxns(ctx, gate)
		cancel()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("kafka: dev broker: ending the transactions a crash left open in %s: %w", cfg.Dir, err)
		}
		gate.open()
	}
	return b, nil
}

// CrashAborted are the transactions that the broker's start found open after a crash and ended
// with an abort marker.
func (b *DevBroker) CrashAborted() []CrashAbortedTxn { return b.crashed }

// Addrs are the broker's listen addresses (host:port).
func (b *DevBroker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker; with a Dir, its data stays there for the next start.
func (b *DevBroker) Close() { b.c.Close() }
