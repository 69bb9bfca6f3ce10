package devkafka

import (
	"net"
	"testing"
)

// TestStartServesAndCloses: a broker on a free port accepts connections on the address it
// reports, and stops accepting them once closed.
func TestStartServesAndCloses(t *testing.T) {
	b, err := Start(Config{Dir: t.TempDir(), Topics: []string{"words"}})
	if err != nil {
		t.Fatal(err)
	}
	addrs := b.Addrs()
	if len(addrs) != 1 {
		b.Close()
		t.Fatalf("Addrs() = %v; want one address", addrs)
	}
	c, err := net.Dial("tcp", addrs[0])
	if err != nil {
		b.Close()
		t.Fatalf("dialling the broker: %v", err)
	}
	c.Close()
	b.Close()
	if c, err := net.Dial("tcp", addrs[0]); err == nil {
		c.Close()
		t.Errorf("the broker still accepts connections on %s after Close", addrs[0])
	}
}
