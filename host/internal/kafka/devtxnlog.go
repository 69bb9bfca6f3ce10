package kafka

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A development broker killed while it writes a transaction's commit markers leaves some of the
// transaction's partitions with a COMMIT marker and the others with none, and the group offsets
// that the transaction commits are not on disk yet (kfake applies them after the markers, from
// memory): kfake keeps no transaction log. A Kafka coordinator logs the decision (PrepareCommit,
// with the partitions and offsets) before it writes a marker, and its recovery completes the
// commit. The development broker's start must do the same, or a read_committed reader sees half a
// transaction and the consumer group reads its input again: outputs twice.
//
// So the broker logs, in its directory, the offsets of every TxnOffsetCommit before kfake takes
// it (txnOffsetLog); a COMMIT marker of a producer id and epoch in any partition shows that the
// transaction was committing (a producer's epoch is bumped by every EndTxn, KIP-890, so the pair
// names one transaction); endCrashedTxns then writes COMMIT markers where they are missing and
// commits the logged offsets.

// txnOffsetLogName is the file in the broker's directory that logs transactional offset commits.
const txnOffsetLogName = "wasmstream-txn-offsets.log"

// txnOffsetLogCompactBytes is the size past which the log is rewritten with the latest
// transaction of each producer only.
const txnOffsetLogCompactBytes = 1 << 20

// txnOffset is one line of the log: a partition's offset that a transaction commits to a group.
type txnOffset struct {
	TransactionalID string  `json:"txid"`
	ProducerID      int64   `json:"pid"`
	Epoch           int16   `json:"epoch"`
	Group           string  `json:"group"`
	Topic           string  `json:"topic,omitempty"`    // TxnOffsetCommit v0-5 names the topic,
	TopicID         string  `json:"topic_id,omitempty"` // v6+ gives its id (hex)
	Partition       int32   `json:"partition"`
	Offset          int64   `json:"offset"`
	LeaderEpoch     int32   `json:"leader_epoch"`
	Metadata        *string `json:"metadata,omitempty"`
}

// producerEpoch names one transaction.
type producerEpoch struct {
	id    int64
	epoch int16
}

// groupPartition is one partition's offset in one group; topic is the logged name and id.
type groupPartition struct {
	group, topic string
	partition    int32
}

// txnOffsetLog appends the offsets of each TxnOffsetCommit request to its file before the broker
// handles it. Its methods are called from kfake's control functions, one at a time.
type txnOffsetLog struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	size   int64
	latest map[int64]int16 // each producer's latest epoch logged
	lines  map[producerEpoch][]txnOffset
}

// readTxnOffsets reads the log in dir, in the order written. A missing log is empty; a torn last
// line (a kill mid-write) is left out.
func readTxnOffsets(dir string) ([]txnOffset, error) {
	f, err := os.Open(filepath.Join(dir, txnOffsetLogName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []txnOffset
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var o txnOffset
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			continue // torn by a kill mid-write: only the last line can be
		}
		out = append(out, o)
	}
	return out, sc.Err()
}

// txnOffsetsOf groups logged offsets by transaction, the last logged for a partition winning.
func txnOffsetsOf(lines []txnOffset) map[producerEpoch]map[groupPartition]txnOffset {
	out := map[producerEpoch]map[groupPartition]txnOffset{}
	for _, o := range lines {
		pe := producerEpoch{o.ProducerID, o.Epoch}
		if out[pe] == nil {
			out[pe] = map[groupPartition]txnOffset{}
		}
		out[pe][groupPartition{o.Group, o.Topic + "#" + o.TopicID, o.Partition}] = o
	}
	return out
}

// openTxnOffsetLog opens the log in dir for appending, rewritten with the lines of each
// producer's latest transaction only (a transaction open across a clean restart still needs
// its lines).
func openTxnOffsetLog(dir string) (*txnOffsetLog, error) {
	lines, err := readTxnOffsets(dir)
	if err != nil {
		return nil, fmt.Errorf("kafka: dev broker: reading the transaction offset log: %w", err)
	}
	l := &txnOffsetLog{path: filepath.Join(dir, txnOffsetLogName), latest: map[int64]int16{},
		lines: map[producerEpoch][]txnOffset{}}
	for _, o := range lines {
		l.note(o)
	}
	if err := l.rewrite(); err != nil {
		return nil, fmt.Errorf("kafka: dev broker: the transaction offset log: %w", err)
	}
	return l, nil
}

// logged groups the offsets of each producer's latest transaction by transaction
// (txnOffsetsOf): those a crash may have left committing.
func (l *txnOffsetLog) logged() map[producerEpoch]map[groupPartition]txnOffset {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lines []txnOffset
	for _, ls := range l.lines {
		lines = append(lines, ls...)
	}
	return txnOffsetsOf(lines)
}

// note keeps o as a line of its producer's latest transaction, forgetting the lines of the
// producer's earlier one.
func (l *txnOffsetLog) note(o txnOffset) {
	if old, ok := l.latest[o.ProducerID]; ok && old != o.Epoch {
		delete(l.lines, producerEpoch{o.ProducerID, old}) // that transaction has ended
	}
	l.latest[o.ProducerID] = o.Epoch
	pe := producerEpoch{o.ProducerID, o.Epoch}
	l.lines[pe] = append(l.lines[pe], o)
}

// rewrite replaces the file with the lines of each producer's latest transaction.
func (l *txnOffsetLog) rewrite() error {
	tmp := l.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var size int64
	lines := map[producerEpoch][]txnOffset{}
	for pid, epoch := range l.latest {
		pe := producerEpoch{pid, epoch}
		for _, o := range l.lines[pe] {
			b, _ := json.Marshal(o)
			n, _ := w.Write(append(b, '\n'))
			size += int64(n)
		}
		lines[pe] = l.lines[pe]
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return err
	}
	if l.f != nil {
		l.f.Close()
	}
	if l.f, err = os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return err
	}
	l.size, l.lines = size, lines
	return nil
}

// logCommit appends the offsets of req. An error means they are not logged: the request must be
// refused, or a crash while its transaction commits would lose them.
func (l *txnOffsetLog) logCommit(req *kmsg.TxnOffsetCommitRequest) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("the transaction offset log is closed")
	}
	var buf []byte
	for _, t := range req.Topics {
		var id string
		if t.TopicID != ([16]byte{}) {
			id = hex.EncodeToString(t.TopicID[:])
		}
		for _, p := range t.Partitions {
			o := txnOffset{TransactionalID: req.TransactionalID, TopicID: id, ProducerID: req.ProducerID, Epoch: req.ProducerEpoch, Group: req.Group, Topic: t.Topic,
				Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata}
			b, err := json.Marshal(o)
			if err != nil {
				return err
			}
			buf = append(append(buf, b...), '\n')
			l.note(o)
		}
	}
	// One write: a kill of the process leaves it whole in the page cache, or not at all.
	n, err := l.f.Write(buf)
	l.size += int64(n)
	if err != nil {
		return err
	}
	if l.size > txnOffsetLogCompactBytes {
		return l.rewrite()
	}
	return nil
}

// control is the kfake control function of TxnOffsetCommit: it logs the request and lets the
// broker handle it, or refuses it (KAFKA_STORAGE_ERROR) when it cannot be logged.
func (l *txnOffsetLog) control(kreq kmsg.Request) (kmsg.Response, error, bool) {
	req := kreq.(*kmsg.TxnOffsetCommitRequest)
	err := l.logCommit(req)
	if err == nil {
		return nil, nil, false
	}
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.KafkaStorageError.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil, true
}

// close closes the file.
func (l *txnOffsetLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("kafka: dev broker: the transaction offset log: %w", err)
	}
	return nil
}
