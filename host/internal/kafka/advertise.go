package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Every host of a group advertises the address of its admin API in its consumer member
// metadata: the user data of each balancer's metadata ends with the address, its length and a
// magic (appendAddr). The group coordinator keeps every member's metadata and the assignment
// the leader gave it, and answers DescribeGroups with both: any member (any host) can so tell,
// from the coordinator's current generation rather than from a view of its own, which host owns
// which partition and where its admin API is (Describe). The leader strips the address off
// before the wrapped balancer reads the metadata, so the balancer's own user data (sticky's, the
// standby progress) is untouched.

// addrMagic ends the user data of a member that advertises an address.
var addrMagic = []byte("wsaddr01")

// advertising wraps a balancer to append the host's admin address to its metadata.
type advertising struct {
	kgo.GroupBalancer
	addr func() string
}

func (b advertising) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	raw := b.GroupBalancer.JoinGroupMetadata(interests, current, generation)
	meta := kmsg.NewConsumerMemberMetadata()
	if err := meta.ReadFrom(raw); err != nil {
		return raw
	}
	meta.UserData = appendAddr(meta.UserData, b.addr())
	return meta.AppendTo(nil)
}

func (b advertising) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	clean := make([]kmsg.JoinGroupResponseMember, len(members))
	for i, m := range members {
		clean[i] = m
		meta := kmsg.NewConsumerMemberMetadata()
		if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
			continue // the wrapped balancer reports it
		}
		if inner, _, ok := splitAddr(meta.UserData); ok {
			meta.UserData = inner
			clean[i].ProtocolMetadata = meta.AppendTo(nil)
		}
	}
	return b.GroupBalancer.MemberBalancer(clean)
}

// appendAddr appends addr and the trailer (its length and the magic) to userData.
func appendAddr(userData []byte, addr string) []byte {
	out := slices.Clone(userData)
	out = append(out, addr...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(addr)))
	return append(out, addrMagic...)
}

// splitAddr undoes appendAddr; ok is false when userData carries no address trailer.
func splitAddr(userData []byte) (inner []byte, addr string, ok bool) {
	n := len(userData)
	if n < 2+len(addrMagic) || !bytes.Equal(userData[n-len(addrMagic):], addrMagic) {
		return userData, "", false
	}
	end := n - len(addrMagic) - 2
	size := int(binary.BigEndian.Uint16(userData[end:]))
	if size > end {
		return userData, "", false
	}
	return userData[:end-size], string(userData[end-size : end]), true
}

// Member is a member of the group as the coordinator describes it.
type Member struct {
	ID     string // the member id
	Addr   string // the admin address it advertises ("" if none)
	Client string // its client id and host, as the coordinator saw them (client@/10.0.0.7)
}

// GroupView is the coordinator's view of a consumer's group.
type GroupView struct {
	// State is the group's state: "Stable" once every member has its assignment;
	// "PreparingRebalance" or "CompletingRebalance" during a rebalance.
	State string
	// Self is this consumer's member id ("" until it joined).
	Self string
	// Owners are the assigned partitions of the consumer's topics and their members.
	Owners map[TopicPartition]Member
	// Partitions is each topic's partition count.
	Partitions map[string]int32
	// Members are every member of the group, with or without partitions, in member id order.
	Members []Member
}

// Stable reports whether the group is stable (no rebalance in progress).
func (v GroupView) Stable() bool { return v.State == "Stable" }

// KeyPartition returns the partition of topic a record with key goes to under the default
// partitioner of Kafka's clients (murmur2 of the key, as franz-go's and Java's producers hash a
// keyed record), and false when the topic's partition count is unknown.
func (v GroupView) KeyPartition(topic string, key []byte) (int32, bool) {
	n := v.Partitions[topic]
	if n <= 0 {
		return 0, false
	}
	if key == nil {
		key = []byte{} // a keyed record: nil would be spread, not hashed
	}
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: key}, int(n))), true
}

// partitionCountTTL bounds how long the topics' partition counts are reused.
const partitionCountTTL = 10 * time.Second

// partCounts caches the topics' partition counts (Describe).
type partCounts struct {
	mu     sync.Mutex
	counts map[string]int32
	at     time.Time
}

// Describe asks the group coordinator who owns which partition of the consumer's topics, with
// the admin addresses the owners advertise. It is a round trip to the coordinator (and, every
// partitionCountTTL, one for the topics' partition counts). Safe from any goroutine.
func (c *Consumer) Describe(ctx context.Context) (GroupView, error) {
	<-c.ready
	adm := kadm.NewClient(c.cl)
	v, err := describeGroup(ctx, adm, c.group)
	if err != nil {
		return GroupView{}, err
	}
	v.Self, _ = c.cl.GroupMetadata()
	if v.Partitions, err = c.partitionCounts(ctx, adm); err != nil {
		return GroupView{}, err
	}
	return v, nil
}

// DescribeGroup is the coordinator's view of group for a host that has no consumer in it (a
// task that halted): its state and members, with the admin addresses they advertise. Self and
// Partitions are not set.
func DescribeGroup(ctx context.Context, cfg Config, group string) (GroupView, error) {
	var v GroupView
	err := withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error {
		var err error
		v, err = describeGroup(ctx, adm, group)
		return err
	})
	return v, err
}

func describeGroup(ctx context.Context, adm *kadm.Client, group string) (GroupView, error) {
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return GroupView{}, fmt.Errorf("kafka: describing group %s: %w", group, err)
	}
	g, ok := groups[group]
	if !ok {
		return GroupView{}, fmt.Errorf("kafka: group %s not described", group)
	}
	if errors.Is(g.Err, kerr.GroupIDNotFound) {
		return GroupView{State: "Dead", Owners: map[TopicPartition]Member{}}, nil // no member
	}
	if g.Err != nil {
		return GroupView{}, fmt.Errorf("kafka: describing group %s: %w", group, g.Err)
	}
	v := GroupView{State: g.State, Owners: map[TopicPartition]Member{}}
	for _, m := range g.Members {
		mem := Member{ID: m.MemberID, Client: m.ClientID + "@" + m.ClientHost}
		if meta, ok := m.Join.AsConsumer(); ok {
			_, mem.Addr, _ = splitAddr(meta.UserData)
		}
		v.Members = append(v.Members, mem)
		if as, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range as.Topics {
				for _, p := range t.Partitions {
					v.Owners[TopicPartition{t.Topic, p}] = mem
				}
			}
		}
	}
	slices.SortFunc(v.Members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return v, nil
}

func (c *Consumer) partitionCounts(ctx context.Context, adm *kadm.Client) (map[string]int32, error) {
	pc := &c.counts
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.counts != nil && time.Since(pc.at) < partitionCountTTL {
		return pc.counts, nil
	}
	topics, err := adm.ListTopics(ctx, c.topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka: listing topics %v: %w", c.topics, err)
	}
	counts := map[string]int32{}
	for _, t := range topics.Sorted() {
		if t.Err != nil {
			if errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("kafka: topic %s: %w", t.Topic, t.Err)
		}
		counts[t.Topic] = int32(len(t.Partitions))
	}
	pc.counts, pc.at = counts, time.Now()
	return counts, nil
}
