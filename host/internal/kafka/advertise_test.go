package kafka

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The advertised address rides outermost in the user data: it reads back, the standby progress
// inside it reads back too, and a leader that strips it balances exactly as without it (the
// standby preference included).
func TestAdvertisedAddress(t *testing.T) {
	progress := pp(5, 100)
	b := advertising{GroupBalancer: StandbyBalancer(func() map[TopicPartition]int64 { return progress }), addr: func() string { return "10.0.0.7:7070" }}
	meta := kmsg.NewConsumerMemberMetadata()
	if err := meta.ReadFrom(b.JoinGroupMetadata([]string{"t"}, map[string][]int32{"t": {2, 3}}, 3)); err != nil {
		t.Fatal(err)
	}
	inner, addr, ok := splitAddr(meta.UserData)
	if !ok || addr != "10.0.0.7:7070" {
		t.Fatalf("splitAddr = %q, %v; want the address", addr, ok)
	}
	if _, got, ok := splitProgress(inner); !ok || !maps.Equal(got, progress) {
		t.Fatalf("the progress under the address: %v %v, want %v", got, ok, progress)
	}
	if _, _, ok := splitAddr(inner); ok {
		t.Fatal("an address found in user data without one")
	}

	advertised := func(m kmsg.JoinGroupResponseMember, addr string) kmsg.JoinGroupResponseMember {
		meta := kmsg.NewConsumerMemberMetadata()
		if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
			t.Fatal(err)
		}
		meta.UserData = appendAddr(meta.UserData, addr)
		m.ProtocolMetadata = meta.AppendTo(nil)
		return m
	}
	plain := []kmsg.JoinGroupResponseMember{member("a", []int32{2, 3}, pp(5, 100)), member("b", []int32{4, 5}, pp(100, 5))}
	want := balance(t, plain...)
	mb, _, err := advertising{GroupBalancer: StandbyBalancer(nil), addr: func() string { return "" }}.MemberBalancer(
		[]kmsg.JoinGroupResponseMember{advertised(plain[0], "h1:1"), advertised(plain[1], "")})
	if err != nil {
		t.Fatal(err)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"t": 6})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int32{}
	for member, ts := range into.(*kgo.BalancePlan).AsMemberIDMap() {
		got[member] = ts["t"]
		slices.Sort(got[member])
	}
	if !reflect.DeepEqual(got, want) || want["a"][0] != 1 || want["b"][0] != 0 {
		t.Fatalf("with addresses %v, without %v (want 1 to a, 0 to b)", got, want)
	}
}
