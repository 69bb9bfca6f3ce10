package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// The peer: the same three tasks written the way goka's documentation shows. goka keeps a
// processor's state in a group table: a local LevelDB per partition plus a compacted Kafka topic
// "<group>-table" that every SetValue also produces to; it commits an input offset once the
// record's table write and outputs are acknowledged. It runs on goka's default sarama
// configuration (snappy, acks from the leader, 100 ms / 64 KiB flushes), except that it starts
// from the oldest offset, since the input is written before the processor starts.

// gokaRun runs the goka version of task ("noop", "counter" or "wordcount") over "in" in a
// fresh group until its callback has seen every record.
func gokaRun(b *testing.B, c cluster, task string, records int) pipelineRun {
	cfg := goka.DefaultConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	goka.ReplaceGlobalConfig(cfg)
	tmc := goka.NewTopicManagerConfig()
	tmc.Table.Replication = 1 // one broker
	tmc.Stream.Replication = 1

	var n atomic.Int64
	group := goka.Group("goka-" + task)
	out := goka.Stream("goka-" + task + "-out")
	var edges []goka.Edge
	switch task {
	case "noop":
		edges = []goka.Edge{goka.Input("in", new(codec.Bytes), func(ctx goka.Context, msg any) { n.Add(1) })}
	case "counter":
		edges = []goka.Edge{
			goka.Input("in", new(codec.Bytes), func(ctx goka.Context, msg any) {
				var count int64
				if v := ctx.Value(); v != nil {
					count = v.(int64)
				}
				count++
				ctx.SetValue(count)
				ctx.Emit(out, ctx.Key(), strconv.AppendInt(nil, count, 10))
				n.Add(1)
			}),
			goka.Persist(new(codec.Int64)),
			goka.Output(out, new(codec.Bytes)),
		}
	case "wordcount":
		// A goka table holds one value per record key: the key's word counts, as a map.
		edges = []goka.Edge{
			goka.Input("in", new(codec.Bytes), func(ctx goka.Context, msg any) {
				counts, _ := ctx.Value().(wordCounts)
				if counts == nil {
					counts = wordCounts{}
				}
				eachWord(msg.([]byte), func(w []byte) {
					c := counts[string(w)] + 1
					counts[string(w)] = c
					v := append(append(append(make([]byte, 0, len(w)+8), w...), ' '), strconv.FormatUint(c, 10)...)
					ctx.Emit(out, ctx.Key(), v)
				})
				ctx.SetValue(counts)
				n.Add(1)
			}),
			goka.Persist(wordCountsCodec{}),
			goka.Output(out, new(codec.Bytes)),
		}
	default:
		b.Fatalf("goka: no task %q", task)
	}
	p, err := goka.NewProcessor(c.ListenAddrs(), goka.DefineGroup(group, edges...),
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(tmc)),
		goka.WithStorageBuilder(storage.DefaultBuilder(filepath.Join(b.TempDir(), "goka"))),
		goka.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		b.Fatalf("goka %s: %v", task, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	m := newMeter(records)
	go func() { stopped <- p.Run(ctx) }()
	for n.Load() < int64(records) {
		time.Sleep(10 * time.Millisecond)
		m.seen(int(n.Load()))
		select {
		case err := <-stopped:
			b.Fatalf("goka %s stopped: %v", task, err)
		default:
		}
	}
	r := m.done()
	cancel()
	if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatalf("goka %s: %v", task, err)
	}
	return r
}

// eachWord calls f with each word of text, lowercased, as the wordcount guests split it (runs
// of ASCII letters and digits; min_len 1). The slice is valid until f returns.
func eachWord(text []byte, f func([]byte)) {
	var word []byte
	for i := 0; i < len(text); {
		if !isAlnum(text[i]) {
			i++
			continue
		}
		word = word[:0]
		for ; i < len(text) && isAlnum(text[i]); i++ {
			c := text[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			word = append(word, c)
		}
		f(word)
	}
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// wordCounts is the goka wordcount's table value: a key's count per word.
type wordCounts map[string]uint64

// wordCountsCodec encodes wordCounts compactly: per word, its length and the count as uvarints
// around the word's bytes.
type wordCountsCodec struct{}

func (wordCountsCodec) Encode(v any) ([]byte, error) {
	m := v.(wordCounts)
	b := make([]byte, 0, 16*len(m))
	for w, n := range m {
		b = binary.AppendUvarint(b, uint64(len(w)))
		b = append(b, w...)
		b = binary.AppendUvarint(b, n)
	}
	return b, nil
}

func (wordCountsCodec) Decode(b []byte) (any, error) {
	m := wordCounts{}
	for len(b) > 0 {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return nil, errors.New("wordcount table: truncated word")
		}
		w := string(b[k : k+int(l)])
		b = b[k+int(l):]
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, errors.New("wordcount table: truncated count")
		}
		b = b[k:]
		m[w] = n
	}
	return m, nil
}
