package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DevBroker is the embedded development broker: an in-process Kafka-protocol cluster
// (franz-go's kfake) on loopback, with its data kept in a directory across restarts.
type DevBroker struct {
	c       *kfake.Cluster
	txns    *txnOffsetLog // with a Dir: the offsets transactions commit, for a crash's recovery
	crashed []CrashEndedTxn
	offsets int // transactions whose group offsets the start committed, every marker written
}

// DevBrokerConfig configures the development broker.
type DevBrokerConfig struct {
	Dir        string   // where records and group offsets are kept; "" keeps them in memory
	Port       int      // loopback port; 0 picks one
	Partitions int32    // partitions of the topics it creates; default 4
	Topics     []string // topics to create
}

// StartDevBroker starts the broker. Close stops it. With a Dir that a killed broker left, it
// first ends every transaction that the kill left without its markers (CrashEnded), before it
// lets any client in: it completes one that was committing, and aborts the others.
func StartDevBroker(cfg DevBrokerConfig) (*DevBroker, error) {
	if cfg.Partitions <= 0 {
		cfg.Partitions = 4
	}
	if cfg.Dir == "" {
		c, _, err := startDevCluster(cfg)
		if err != nil {
			return nil, err
		}
		return &DevBroker{c: c}, nil
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafka: dev broker: %w", err)
	}
	txns, err := openTxnOffsetLog(cfg.Dir)
	if err != nil {
		return nil, err
	}
	c, gate, crashed, offsets, err := recoverDevCluster(cfg, txns.logged())
	if err != nil {
		txns.close()
		return nil, err
	}
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return txns.control(req)
	})
	gate.open()
	return &DevBroker{c: c, txns: txns, crashed: crashed, offsets: offsets}, nil
}

// startDevCluster starts the cluster; with a Dir, behind a gate that holds clients back until
// it is opened.
func startDevCluster(cfg DevBrokerConfig) (*kfake.Cluster, *gatedListener, error) {
	var gate *gatedListener
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
		return nil, nil, fmt.Errorf("kafka: dev broker: %w", err)
	}
	// kfake seeds its topics only into an empty directory: on a restart over an earlier run's,
	// the topics that run did not have (a task or a --topic added since) are created here.
	for _, t := range cfg.Topics {
		if c.TopicInfo(t) != nil {
			continue
		}
		if err := c.CreateTopic(t, cfg.Partitions, nil); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			c.Close()
			return nil, nil, fmt.Errorf("kafka: dev broker: creating topic %q: %w", t, err)
		}
	}
	return c, gate, nil
}

// recoverDevCluster starts the cluster on cfg.Dir with its gate closed and ends the transactions
// a kill left without markers. A transaction it completes is still aborted in the index the
// cluster built when it loaded (kfake's own recovery aborts every unmarked one), so the cluster
// is then stopped and started again on those partitions' logs alone (their snapshots, which a
// clean stop writes from the index, removed), which now end with the COMMIT markers.
func recoverDevCluster(cfg DevBrokerConfig, offsets map[producerEpoch]map[groupPartition]txnOffset) (*kfake.Cluster, *gatedListener, []CrashEndedTxn, int, error) {
	end := func(c *kfake.Cluster, gate *gatedListener) ([]CrashEndedTxn, int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
		defer cancel()
		crashed, n, err := endCrashedTxns(ctx, gate, offsets)
		if err != nil {
			c.Close()
			return nil, 0, fmt.Errorf("kafka: dev broker: ending the transactions a crash left open in %s: %w", cfg.Dir, err)
		}
		return crashed, n, nil
	}
	c, gate, err := startDevCluster(cfg)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	crashed, completed, err := end(c, gate)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	var reload []string
	for _, t := range crashed {
		if t.Committed {
			reload = append(reload, filepath.Join(cfg.Dir, "partitions", fmt.Sprintf("%s-%d", url.PathEscape(t.Topic), t.Partition), "snapshot.json"))
		}
	}
	if len(reload) == 0 {
		return c, gate, crashed, completed, nil
	}
	c.Close()
	for _, snap := range reload {
		if err := os.Remove(snap); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, nil, 0, fmt.Errorf("kafka: dev broker: %w", err)
		}
	}
	if c, gate, err = startDevCluster(cfg); err != nil {
		return nil, nil, nil, 0, err
	}
	again, _, err := end(c, gate)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	for _, t := range again {
		if t.Committed {
			c.Close()
			return nil, nil, nil, 0, fmt.Errorf("kafka: dev broker: the commit of producer %d's transaction in %s/%d was not complete after a restart", t.ProducerID, t.Topic, t.Partition)
		}
	}
	return c, gate, crashed, completed, nil
}

// CrashEnded are the transactions that the broker's start found without their markers after a
// crash, and ended: committed or aborted.
func (b *DevBroker) CrashEnded() []CrashEndedTxn { return b.crashed }

// CrashCompletedOffsets is how many transactions the broker's start found with every COMMIT
// marker written but their group offsets not committed (a kill between the two), and committed
// the offsets of.
func (b *DevBroker) CrashCompletedOffsets() int { return b.offsets }

// Addrs are the broker's listen addresses (host:port).
func (b *DevBroker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker; with a Dir, its data stays there for the next start.
func (b *DevBroker) Close() {
	b.c.Close()
	if b.txns != nil {
		b.txns.close()
	}
}
