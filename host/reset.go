package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/task"
	"github.com/wasmstream/wasmstream/store"
)

// Replay and reset (`wasmstream reset`): a task's input positions, its state and timers, its
// group offsets and its changelog move together, on a stopped host.

// ErrResetRefused is returned by OfflineReset when the reset cannot be made as asked: a target a
// file input does not take, a stdin input, a partition the topic does not have, a consumer
// group with members.
var ErrResetRefused = errors.New("wasmstream: reset refused")

// ResetTo says where a reset moves a task's inputs. Parse one with ParseResetTo.
type ResetTo struct {
	// Where is "earliest", "latest", "time" or "offsets".
	Where string
	// Time, with Where "time": each Kafka partition restarts at its first record whose
	// timestamp is at or after it (its end if none is).
	Time time.Time
	// Offsets, with Where "offsets": the offset each named partition restarts at. A topic of ""
	// stands for the input's only topic. Partitions not named are left as they are.
	Offsets map[ResetPartition]int64
}

// ResetPartition names a partition in ResetTo.Offsets.
type ResetPartition struct {
	Topic     string
	Partition int32
}

func (r ResetTo) String() string {
	switch r.Where {
	case "time":
		return r.Time.UTC().Format(time.RFC3339Nano)
	case "offsets":
		var parts []string
		for p, o := range r.Offsets {
			s := fmt.Sprintf("%d:%d", p.Partition, o)
			if p.Topic != "" {
				s = p.Topic + ":" + s
			}
			parts = append(parts, s)
		}
		slices.Sort(parts)
		return strings.Join(parts, ",")
	}
	return r.Where
}

// ParseResetTo parses earliest, latest, an RFC 3339 time, or a list of partition:offset
// (topic:partition:offset where a task reads several topics), comma-separated.
func ParseResetTo(s string) (ResetTo, error) {
	switch s {
	case "earliest", "latest":
		return ResetTo{Where: s}, nil
	case "":
		return ResetTo{}, errors.New("empty: want earliest, latest, an RFC 3339 time or partition:offset,...")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return ResetTo{Where: "time", Time: t}, nil
	}
	r := ResetTo{Where: "offsets", Offsets: map[ResetPartition]int64{}}
	for _, item := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(item), ":")
		var p ResetPartition
		switch len(f) {
		case 2:
		case 3:
			p.Topic, f = f[0], f[1:]
		default:
			return ResetTo{}, fmt.Errorf("%q: want earliest, latest, an RFC 3339 time (2026-11-27T22:00:00Z) or partition:offset,... (topic:partition:offset for a task of several topics)", s)
		}
		pn, err1 := strconv.ParseInt(f[0], 10, 32)
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || pn < 0 || o < 0 {
			return ResetTo{}, fmt.Errorf("%q: partition and offset must be numbers of at least 0", item)
		}
		p.Partition = int32(pn)
		if _, dup := r.Offsets[p]; dup {
			return ResetTo{}, fmt.Errorf("%q: partition named twice", item)
		}
		r.Offsets[p] = o
	}
	return r, nil
}

// ResetStream is what a reset does (or, dry, would do) to one stream of the task.
type ResetStream struct {
	Input  string `json:"input"`
	Stream string `json:"stream"` // the store's name: file:<input>/0, kafka:<topic>/<partition>
	// From is the local checkpoint's next offset (line, for a file), -1 if there is none.
	From int64 `json:"from"`
	// Committed is the group's committed offset of a Kafka partition, -1 if there is none.
	Committed int64 `json:"committed"`
	// To is where the stream restarts.
	To int64 `json:"to"`
	// Head is the stream's end at the reset (a file's line count): the replay has caught up
	// once the stream's position reaches it; status and metrics show the way there.
	Head int64 `json:"head"`
	// Keys and Timers are what moved aside.
	Keys   int64 `json:"keys"`
	Timers int64 `json:"timers"`
	// Tombstones is the number of keys whose changelog snapshot was tombstoned.
	Tombstones int64 `json:"tombstones"`
	// ChangelogEnd is the changelog partition's end after the tombstones: a host restores the
	// partition's state from there (0: from the changelog's start).
	ChangelogEnd int64 `json:"changelog_end,omitempty"`
	// ChangelogEpoch is the owner epoch of the reset's changelog records, which the position
	// resuming the changelog at ChangelogEnd carries (the next owner takes an epoch above it).
	ChangelogEpoch uint64 `json:"changelog_epoch,omitempty"`
}

// ResetReport is what OfflineReset did (or would do, with DryRun).
type ResetReport struct {
	Task string `json:"task"`
	To   string `json:"to"`
	// Backup is the task name in the store that the moved state and timers are kept under
	// (`wasmstream state --task <Backup>` prints them).
	Backup    string        `json:"backup"`
	DataDir   string        `json:"data_dir"`
	Group     string        `json:"group,omitempty"`
	Changelog string        `json:"changelog,omitempty"`
	DryRun    bool          `json:"dry_run"`
	Streams   []ResetStream `json:"streams"`
	// Hosts are the other hosts of the task's group that a reset on a running host reset with
	// it (ResetTask), and what each moved aside; in a dry run, those it would ask.
	Hosts []HostReset `json:"hosts,omitempty"`
	// Warnings say what of a group's reset is not done yet, and what finishes it.
	Warnings []string `json:"warnings,omitempty"`
	// Halted is why the task had halted, for a reset on a running host of a halted task (which
	// it started again); "" for a task that ran.
	Halted string `json:"halted,omitempty"`
}

// HostReset is what another host of a group did in a reset on a running host.
type HostReset struct {
	Addr   string `json:"addr"`   // its admin address
	Member string `json:"member"` // its client id and host in the group
	// Backup is where its state and timers were moved aside, in its own data directory.
	Backup string `json:"backup,omitempty"`
	Keys   int64  `json:"keys"`
	Timers int64  `json:"timers"`
	// Error says why it was not told the reset's positions (it follows them on its own).
	Error string `json:"error,omitempty"`
}

// resetItem is one stream to reset.
type resetItem struct {
	ResetStream
	tp    kafka.TopicPartition
	kafka bool
	bytes int64 // file: the byte position of line To
}

// OfflineReset resets task name of a stopped host to where: each input's position in the local
// checkpoint and, for a Kafka input, the group's committed offsets; the task's state and timers
// of those streams move aside in the store, under the task name ResetReport.Backup (nothing is
// deleted); with a changelog, each partition's changelog gets a tombstone for every key it
// holds and a position record at the new offset, so that no host restores the old state. A
// file input resets to earliest (line 0) or latest (after its last line) only; a stdin input
// cannot be reset. With dryRun nothing is written: the report says what would move.
//
// It fails with ErrHostRunning if a host holds the data directory, ErrUnknownTask,
// ErrResetRefused (wrapping kafka.ErrGroupActive when the group has members: stop every host
// of the task first). A reset that fails midway can be run again: what moved stays moved.
func OfflineReset(ctx context.Context, cfg Config, name string, to ResetTo, dryRun bool) (_ *ResetReport, err error) {
	cfg = cfg.WithDefaults()
	var tc *TaskConfig
	for i := range cfg.Tasks {
		if cfg.Tasks[i].Name == name {
			tc = &cfg.Tasks[i]
		}
	}
	if tc == nil {
		return nil, fmt.Errorf("%w: %q is not a task of the configuration", ErrUnknownTask, name)
	}
	rep := &ResetReport{Task: name, To: to.String(), DataDir: cfg.DataDir, DryRun: dryRun,
		Backup: name + ".reset-" + time.Now().UTC().Format("20060102T150405Z")}
	if len(rep.Backup) > store.MaxTaskLen {
		return nil, fmt.Errorf("%w: task name %q too long for a backup name (%s)", ErrResetRefused, name, rep.Backup)
	}
	var items []resetItem
	var kin *InputConfig
	for i := range tc.Inputs {
		in := &tc.Inputs[i]
		switch in.Type {
		case "kafka":
			kin = in
		case "stdin":
			return nil, fmt.Errorf("%w: task %s: input %s reads stdin, which cannot be read again; a reset applies to file and kafka inputs", ErrResetRefused, name, in.Name)
		default:
			it, err := fileResetItem(in, to)
			if err != nil {
				return nil, fmt.Errorf("%w: task %s: %v", ErrResetRefused, name, err)
			}
			items = append(items, it)
		}
	}
	kc := cfg.Kafka.client()
	if kin != nil {
		if cfg.Kafka.Embedded.Enable && len(cfg.Kafka.Brokers) == 0 {
			stop, err := startEmbedded(&cfg)
			if err != nil {
				return nil, err
			}
			defer stop()
			kc = cfg.Kafka.client()
		}
		rep.Group = kafkaInput(cfg, *tc, *kin).Group
		if tc.Changelog.Enabled {
			rep.Changelog = tc.Changelog.Topic
		}
		ks, err := kafkaResetItems(ctx, kc, rep.Group, kin, to)
		if err != nil {
			return nil, err
		}
		items = append(items, ks...)
		if err := kafka.CheckGroupEmpty(ctx, kc, rep.Group); err != nil {
			return nil, fmt.Errorf("%w: %v: stop every host running task %s first", ErrResetRefused, err, name)
		}
	}

	db, err := openOffline(cfg.DataDir, dryRun)
	switch {
	case errors.Is(err, ErrNoState) && dryRun:
		db = nil // no local state: nothing to move
	case errors.Is(err, ErrNoState):
		// No local state: the positions go into a new store (a file reset to its end needs one).
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("wasmstream: %w", err)
		}
		if db, err = store.Open(filepath.Join(cfg.DataDir, "state"), store.Options{}); err != nil {
			return nil, fmt.Errorf("wasmstream: %w", err)
		}
	case err != nil:
		return nil, err
	}
	if db != nil {
		defer func() {
			if cerr := db.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	if err := applyReset(ctx, db, kc, rep, items, false); err != nil {
		return nil, err
	}
	return rep, nil
}

// applyReset carries out (with rep.DryRun, counts) the reset of items of task rep.Task in db
// (nil: no local state) and, for Kafka items, in the changelog and the group, and fills
// rep.Streams. With local, only db is written: the changelog and the group were reset by
// another host of the group (each item's ChangelogEnd says where the changelog resumes). The
// task must not run.
func applyReset(ctx context.Context, db *store.DB, kc kafka.Config, rep *ResetReport, items []resetItem, local bool) error {
	name, dryRun := rep.Task, rep.DryRun
	streams := map[string]uint32{}
	if db != nil {
		infos, err := db.Streams(name)
		if err != nil {
			return fmt.Errorf("wasmstream: %w", err)
		}
		for _, s := range infos {
			streams[s.Name] = s.ID
		}
	}

	// First the state moves aside (a crash after it leaves the old positions with no state:
	// run the reset again), then the changelog, then the local positions, then the group.
	for i := range items {
		it := &items[i]
		id, has := streams[it.Stream]
		if db == nil || !has {
			continue
		}
		if dryRun {
			if err := countStream(db, name, id, it); err != nil {
				return err
			}
			continue
		}
		bid, err := db.StreamID(rep.Backup, it.Stream)
		if err != nil {
			return fmt.Errorf("wasmstream: %w", err)
		}
		m, err := db.MoveStream(name, id, rep.Backup, bid)
		if err != nil {
			return fmt.Errorf("wasmstream: task %s: moving %s aside: %w", name, it.Stream, err)
		}
		it.Keys, it.Timers = m.Keys, m.Timers
		if m.HadPosition {
			it.From = m.Position.Next
		}
	}
	if rep.Changelog != "" && !local {
		for i := range items {
			it := &items[i]
			if !it.kafka {
				continue
			}
			cr, err := task.ResetChangelog(ctx, kc, rep.Changelog, it.tp, it.To, dryRun)
			if err != nil {
				return fmt.Errorf("wasmstream: task %s: %w", name, err)
			}
			it.Tombstones, it.ChangelogEnd, it.ChangelogEpoch = cr.Tombstones, cr.End, cr.Epoch
		}
	}
	if !dryRun {
		for i := range items {
			it := &items[i]
			if db == nil {
				break
			}
			id, err := db.StreamID(name, it.Stream)
			if err != nil {
				return fmt.Errorf("wasmstream: %w", err)
			}
			pos := store.Position{Next: it.To, Horizon: -1, Resume: it.bytes, Watermark: -1}
			if it.kafka {
				pos.Resume, pos.Epoch = it.ChangelogEnd, it.ChangelogEpoch
			}
			if err := db.Restore(name, id, nil, &pos); err != nil {
				return fmt.Errorf("wasmstream: task %s: position of %s: %w", name, it.Stream, err)
			}
			var rp *store.Replay
			if it.Head > it.To {
				rp = &store.Replay{From: it.To, Head: it.Head, At: time.Now().UnixMilli()}
			}
			if err := db.SetReplay(name, id, rp); err != nil {
				return fmt.Errorf("wasmstream: task %s: %w", name, err)
			}
		}
		offs := map[kafka.TopicPartition]int64{}
		for _, it := range items {
			if it.kafka {
				offs[it.tp] = it.To
			}
		}
		if len(offs) > 0 && !local {
			if err := kafka.CommitOffsets(ctx, kc, rep.Group, offs); err != nil {
				return fmt.Errorf("wasmstream: task %s: the state and local positions were reset, but the group offsets were not (run the reset again): %w", name, err)
			}
		}
	}
	for _, it := range items {
		rep.Streams = append(rep.Streams, it.ResetStream)
	}
	return nil
}

// countStream fills a dry run's item from the store: its position and what would move.
func countStream(db *store.DB, name string, id uint32, it *resetItem) error {
	if p, ok, err := db.Position(name, id); err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	} else if ok {
		it.From = p.Next
	}
	err := db.Marks(name, id, func([]byte, int64) bool { it.Keys++; return true })
	if err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	}
	n, err := db.TimerCount(name, id)
	it.Timers = int64(n)
	if err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	}
	return nil
}

// fileResetItem is the reset of a file input: to line 0, or after its last line.
func fileResetItem(in *InputConfig, to ResetTo) (resetItem, error) {
	it := resetItem{ResetStream: ResetStream{Input: in.Name, Stream: "file:" + in.Name + "/0", From: -1, Committed: -1}}
	switch to.Where {
	case "earliest", "latest":
		lines, size, err := countLines(in.Path)
		if err != nil {
			return it, fmt.Errorf("input %s: %w", in.Name, err)
		}
		it.Head = lines
		if to.Where == "latest" {
			it.To, it.bytes = lines, size
		}
		return it, nil
	}
	return it, fmt.Errorf("input %s is a file: it resets to earliest (its first line) or latest (after its last), not to %s", in.Name, to)
}

// countLines counts the records of a file as the file reader numbers them (every line, the last
// one even without a line ending) and its size.
func countLines(path string) (lines, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	buf := make([]byte, 1<<20)
	last := byte('\n')
	for {
		n, err := br.Read(buf)
		if n > 0 {
			lines += int64(bytes.Count(buf[:n], []byte{'\n'}))
			size += int64(n)
			last = buf[n-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if last != '\n' {
		lines++
	}
	return lines, size, nil
}

// kafkaResetItems lists the partitions of a kafka input to reset, with their targets and the
// group's committed offsets.
func kafkaResetItems(ctx context.Context, kc kafka.Config, group string, in *InputConfig, to ResetTo) ([]resetItem, error) {
	where, ms := to.Where, to.Time.UnixMilli()
	if where == "offsets" {
		where = "latest" // to know the partitions, and to check the offsets against the ends
	}
	target, err := kafka.ListOffsets(ctx, kc, in.Topics, where, ms)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	heads := target // where == "latest"
	if where != "latest" {
		if heads, err = kafka.ListOffsets(ctx, kc, in.Topics, "latest", 0); err != nil {
			return nil, fmt.Errorf("wasmstream: %w", err)
		}
	}
	if to.Where == "offsets" {
		ends := heads
		target = map[kafka.TopicPartition]int64{}
		for p, o := range to.Offsets {
			topic := p.Topic
			if topic == "" {
				if len(in.Topics) > 1 {
					return nil, fmt.Errorf("%w: input %s reads %s: name the topic of partition %d (topic:partition:offset)",
						ErrResetRefused, in.Name, strings.Join(in.Topics, ", "), p.Partition)
				}
				topic = in.Topics[0]
			}
			tp := kafka.TopicPartition{Topic: topic, Partition: p.Partition}
			end, ok := ends[tp]
			if !ok {
				return nil, fmt.Errorf("%w: input %s: topic %s has no partition %d", ErrResetRefused, in.Name, topic, p.Partition)
			}
			if o > end {
				return nil, fmt.Errorf("%w: input %s: offset %d of %s partition %d is past its end (%d)", ErrResetRefused, in.Name, o, topic, p.Partition, end)
			}
			target[tp] = o
		}
	}
	committed, err := kafka.CommittedOffsets(ctx, kc, group, in.Topics)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	var out []resetItem
	for tp, o := range target {
		c, ok := committed[tp]
		if !ok {
			c = -1
		}
		out = append(out, resetItem{ResetStream: ResetStream{Input: in.Name, Stream: "kafka:" + tp.Topic + "/" + strconv.Itoa(int(tp.Partition)),
			From: -1, Committed: c, To: o, Head: heads[tp]}, tp: tp, kafka: true})
	}
	slices.SortFunc(out, func(a, b resetItem) int {
		if c := strings.Compare(a.tp.Topic, b.tp.Topic); c != 0 {
			return c
		}
		return int(a.tp.Partition - b.tp.Partition)
	})
	return out, nil
}

// OfflineDropBackup deletes a backup that OfflineReset moved a task's state into (its name,
// <task>.reset-<time>, is ResetReport.Backup), in the data directory of a stopped host.
func OfflineDropBackup(dataDir, backup string) (err error) {
	if !strings.Contains(backup, ".reset-") {
		return fmt.Errorf("%w: %q is not the name of a reset's backup (<task>.reset-<time>)", ErrResetRefused, backup)
	}
	db, err := openOffline(dataDir, false)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	tasks, err := db.Tasks()
	if err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	}
	if !slices.Contains(tasks, backup) {
		return fmt.Errorf("%w: no backup %q in %s", ErrUnknownTask, backup, dataDir)
	}
	if err := db.DropTask(backup); err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	}
	return nil
}
