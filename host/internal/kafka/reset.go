package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// What `wasmstream reset` asks of the cluster: where to move a group's offsets, and moving them.

// ErrGroupActive is returned by CheckGroupEmpty when the group has members: its offsets can only be
// moved while no consumer is in it.
var ErrGroupActive = errors.New("kafka: the consumer group has active members")

// ListOffsets lists, for every partition of topics, the offset of where: "earliest" (the log
// start), "latest" (the end) or, with where "time", the first offset whose timestamp is at or
// after ms (the end when none is).
func ListOffsets(ctx context.Context, cfg Config, topics []string, where string, ms int64) (map[TopicPartition]int64, error) {
	out := map[TopicPartition]int64{}
	err := withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error {
		var listed kadm.ListedOffsets
		var err error
		switch where {
		case "earliest":
			listed, err = adm.ListStartOffsets(ctx, topics...)
		case "latest":
			listed, err = adm.ListEndOffsets(ctx, topics...)
		case "time":
			listed, err = adm.ListOffsetsAfterMilli(ctx, ms, topics...)
		default:
			return fmt.Errorf("kafka: unknown offset %q", where)
		}
		if err != nil {
			return fmt.Errorf("kafka: listing offsets of %s: %w", strings.Join(topics, ", "), err)
		}
		var lerr error
		listed.Each(func(o kadm.ListedOffset) {
			switch {
			case o.Partition < 0 && errors.Is(o.Err, kerr.UnknownTopicOrPartition):
				lerr = errors.Join(lerr, fmt.Errorf("kafka: topic %q: %w", o.Topic, ErrNoTopic))
			case o.Err != nil:
				lerr = errors.Join(lerr, fmt.Errorf("kafka: listing offsets of %s/%d: %w", o.Topic, o.Partition, o.Err))
			default:
				out[TopicPartition{o.Topic, o.Partition}] = o.Offset
			}
		})
		if lerr != nil {
			return lerr
		}
		for _, t := range topics {
			if _, ok := listed[t]; !ok {
				return fmt.Errorf("kafka: topic %q: %w", t, ErrNoTopic)
			}
		}
		return nil
	})
	return out, err
}

// CheckGroupEmpty fails with ErrGroupActive, naming the members and their hosts, when group has
// members.
func CheckGroupEmpty(ctx context.Context, cfg Config, group string) error {
	return withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error {
		dg, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return fmt.Errorf("kafka: describing group %s: %w", group, err)
		}
		g, ok := dg[group]
		if !ok {
			return nil
		}
		if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
			return fmt.Errorf("kafka: describing group %s: %w", group, g.Err)
		}
		if len(g.Members) == 0 {
			return nil
		}
		var who []string
		for _, m := range g.Members {
			who = append(who, m.ClientID+"@"+m.ClientHost)
		}
		sort.Strings(who)
		return fmt.Errorf("%w: group %s (%s) has %d: %s", ErrGroupActive, group, g.State, len(g.Members), strings.Join(who, ", "))
	})
}

// CommittedOffsets returns group's committed offsets for the partitions of topics it has one for.
func CommittedOffsets(ctx context.Context, cfg Config, group string, topics []string) (map[TopicPartition]int64, error) {
	return committedOffsets(ctx, cfg, group, topics, func(kadm.OffsetResponse) bool { return true })
}

// ResetCommits returns group's committed offsets of the partitions of topics that `wasmstream
// reset` set (their metadata is ResetMetadata): no member has committed there since.
func ResetCommits(ctx context.Context, cfg Config, group string, topics []string) (map[TopicPartition]int64, error) {
	return committedOffsets(ctx, cfg, group, topics, func(r kadm.OffsetResponse) bool { return r.Metadata == ResetMetadata })
}

// committedOffsets returns group's committed offsets for the partitions of topics that keep
// accepts.
func committedOffsets(ctx context.Context, cfg Config, group string, topics []string, keep func(kadm.OffsetResponse) bool) (map[TopicPartition]int64, error) {
	out := map[TopicPartition]int64{}
	err := withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error {
		rs, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
		if err != nil {
			return fmt.Errorf("kafka: fetching the offsets of group %s: %w", group, err)
		}
		for t, ps := range rs {
			for p, r := range ps {
				if r.Err == nil && r.At >= 0 && keep(r) {
					out[TopicPartition{t, p}] = r.At
				}
			}
		}
		return nil
	})
	return out, err
}

// CommitOffsets sets group's committed offsets (the group must have no members: see
// CheckGroupEmpty).
func CommitOffsets(ctx context.Context, cfg Config, group string, offs map[TopicPartition]int64) error {
	os := kadm.Offsets{}
	for tp, o := range offs {
		os.Add(kadm.Offset{Topic: tp.Topic, Partition: tp.Partition, At: o, LeaderEpoch: -1, Metadata: ResetMetadata})
	}
	return withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error {
		rs, err := adm.CommitOffsets(ctx, group, os)
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			return fmt.Errorf("kafka: committing the offsets of group %s: %w", group, err)
		}
		return nil
	})
}
