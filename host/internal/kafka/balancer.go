package kafka

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The standby balancer is cooperative-sticky with one preference: a partition that no member
// owns any more (its owner died or left) goes, among the members sticky gives such partitions
// to, to the one whose local copy of its state is furthest along — a warm standby, or a disk
// kept from an earlier ownership — so that the takeover replays the least changelog. It never
// changes how many partitions a member gets, nor moves a partition a member owns, so sticky's
// balance and cooperative rebalancing are untouched.
//
// Each member appends, to the user data of its sticky metadata, the changelog offset its store
// covers for every partition (Progress); the group leader strips it off before sticky reads the
// metadata. A group with members that do not offer the protocol (an older version) falls back
// to plain cooperative-sticky, which every member also offers.

// StandbyProtocol is the balancer's protocol name.
const StandbyProtocol = "wasmstream-standby-sticky"

// progressMagic ends the user data of a member that appended its progress.
var progressMagic = []byte("wsprog01")

type standbyBalancer struct {
	sticky   kgo.GroupBalancer
	progress func() map[TopicPartition]int64
}

// StandbyBalancer returns the standby balancer; progress reports, for the partitions this host
// has a local copy of, the changelog offset the copy covers. It is called at every join.
func StandbyBalancer(progress func() map[TopicPartition]int64) kgo.GroupBalancer {
	return &standbyBalancer{sticky: kgo.CooperativeStickyBalancer(), progress: progress}
}

func (b *standbyBalancer) ProtocolName() string { return StandbyProtocol }
func (b *standbyBalancer) IsCooperative() bool  { return true }

func (b *standbyBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return b.sticky.ParseSyncAssignment(assignment)
}

func (b *standbyBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	raw := b.sticky.JoinGroupMetadata(interests, current, generation)
	meta := kmsg.NewConsumerMemberMetadata()
	if err := meta.ReadFrom(raw); err != nil {
		return raw
	}
	meta.UserData = appendProgress(meta.UserData, b.progress())
	return meta.AppendTo(nil)
}

// appendProgress appends progress and the trailer (its length and the magic) to userData.
func appendProgress(userData []byte, progress map[TopicPartition]int64) []byte {
	tps := make([]TopicPartition, 0, len(progress))
	for tp := range progress {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	out := slices.Clone(userData)
	start := len(out)
	for _, tp := range tps {
		out = binary.BigEndian.AppendUint16(out, uint16(len(tp.Topic)))
		out = append(out, tp.Topic...)
		out = binary.BigEndian.AppendUint32(out, uint32(tp.Partition))
		out = binary.BigEndian.AppendUint64(out, uint64(progress[tp]))
	}
	out = binary.BigEndian.AppendUint32(out, uint32(len(out)-start))
	return append(out, progressMagic...)
}

// splitProgress undoes appendProgress; ok is false when userData carries no (valid) progress.
func splitProgress(userData []byte) (inner []byte, progress map[TopicPartition]int64, ok bool) {
	n := len(userData)
	if n < 4+len(progressMagic) || !bytes.Equal(userData[n-len(progressMagic):], progressMagic) {
		return userData, nil, false
	}
	size := int(binary.BigEndian.Uint32(userData[n-len(progressMagic)-4:]))
	end := n - len(progressMagic) - 4
	if size > end {
		return userData, nil, false
	}
	blob := userData[end-size : end]
	progress = map[TopicPartition]int64{}
	for len(blob) > 0 {
		if len(blob) < 2 {
			return userData, nil, false
		}
		l := int(binary.BigEndian.Uint16(blob))
		if len(blob) < 2+l+12 {
			return userData, nil, false
		}
		tp := TopicPartition{Topic: string(blob[2 : 2+l]), Partition: int32(binary.BigEndian.Uint32(blob[2+l:]))}
		progress[tp] = int64(binary.BigEndian.Uint64(blob[6+l:]))
		blob = blob[14+l:]
	}
	return userData[:end-size], progress, true
}

func (b *standbyBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	mb := &standbyMemberBalancer{progress: map[string]map[TopicPartition]int64{}, owned: map[TopicPartition]bool{}, topics: map[string][]string{}}
	clean := make([]kmsg.JoinGroupResponseMember, len(members))
	for i, m := range members {
		clean[i] = m
		meta := kmsg.NewConsumerMemberMetadata()
		if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
			continue // sticky reports it
		}
		for _, o := range meta.OwnedPartitions {
			for _, p := range o.Partitions {
				mb.owned[TopicPartition{o.Topic, p}] = true
			}
		}
		mb.topics[m.MemberID] = meta.Topics
		if inner, progress, ok := splitProgress(meta.UserData); ok {
			meta.UserData = inner
			clean[i].ProtocolMetadata = meta.AppendTo(nil)
			mb.progress[m.MemberID] = progress
		}
	}
	inner, topics, err := b.sticky.MemberBalancer(clean)
	mb.inner = inner
	return mb, topics, err
}

type standbyMemberBalancer struct {
	inner    kgo.GroupMemberBalancer
	progress map[string]map[TopicPartition]int64 // member → partition → changelog offset its copy covers
	owned    map[TopicPartition]bool             // partitions some member claims to own
	topics   map[string][]string                 // member → topics it consumes
}

// Balance is BalanceOrError without the error (the client calls BalanceOrError).
func (m *standbyMemberBalancer) Balance(topics map[string]int32) kgo.IntoSyncAssignment {
	into, _ := m.BalanceOrError(topics)
	return into
}

func (m *standbyMemberBalancer) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	var into kgo.IntoSyncAssignment
	var err error
	if be, ok := m.inner.(kgo.GroupMemberBalancerOrError); ok {
		into, err = be.BalanceOrError(topics)
	} else {
		into = m.inner.Balance(topics)
	}
	if err == nil {
		m.prefer(into)
	}
	return into, err
}

func (m *standbyMemberBalancer) SetBalanceInfo(info kgo.BalanceInfo) {
	if bi, ok := m.inner.(kgo.GroupMemberBalancerInfo); ok {
		bi.SetBalanceInfo(info)
	}
}

// prefer hands the plan's unowned partitions out again among the members the plan gives them
// to, each member keeping its count: every partition, the ones whose copies differ the most
// first, to the member furthest along that still has room.
func (m *standbyMemberBalancer) prefer(into kgo.IntoSyncAssignment) {
	bp, ok := into.(*kgo.BalancePlan)
	if !ok || len(m.progress) == 0 {
		return
	}
	plan := bp.AsMemberIDMap()
	var free []TopicPartition
	room := map[string]int{}
	orig := map[TopicPartition]string{}
	for member, ts := range plan {
		for topic, ps := range ts {
			for _, p := range ps {
				if tp := (TopicPartition{topic, p}); !m.owned[tp] {
					free = append(free, tp)
					room[member]++
					orig[tp] = member
				}
			}
		}
	}
	if len(room) < 2 {
		return // one member gets them all: nothing to choose
	}
	members := make([]string, 0, len(room))
	for member := range room {
		members = append(members, member)
	}
	slices.Sort(members)
	for _, tp := range free {
		for _, member := range members {
			if !slices.Contains(m.topics[member], tp.Topic) {
				return // sticky's choice stands: not every candidate can take every partition
			}
		}
	}
	covered := func(member string, tp TopicPartition) int64 {
		if v, ok := m.progress[member][tp]; ok {
			return v
		}
		return -1
	}
	spread := func(tp TopicPartition) int64 {
		lo, hi := covered(members[0], tp), covered(members[0], tp)
		for _, member := range members[1:] {
			lo, hi = min(lo, covered(member, tp)), max(hi, covered(member, tp))
		}
		return hi - lo
	}
	slices.SortFunc(free, func(a, b TopicPartition) int {
		return cmp.Or(cmp.Compare(spread(b), spread(a)), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	for member, ts := range plan {
		for topic, ps := range ts {
			ts[topic] = slices.DeleteFunc(ps, func(p int32) bool { return !m.owned[TopicPartition{topic, p}] })
		}
		plan[member] = ts
	}
	for _, tp := range free {
		best := "" // sticky's choice unless another member is strictly further along
		if room[orig[tp]] > 0 {
			best = orig[tp]
		}
		for _, member := range members {
			if room[member] > 0 && (best == "" || covered(member, tp) > covered(best, tp)) {
				best = member
			}
		}
		room[best]--
		plan[best][tp.Topic] = append(plan[best][tp.Topic], tp.Partition)
	}
}
