package admin

import (
	"context"
	"net"
	"sync"
)

// conns bounds the connections the server holds and knows which of them may be dropped.
//
// A connection is busy while an authenticated request runs its handler; every other
// connection (one still sending its request line or headers, one kept alive between
// requests, one whose request is being refused) costs the server a goroutine and buffers
// for nothing yet. At the limit, Accept closes the oldest connection that is not busy to make
// room for the new one, so clients that connect and stall cannot lock a legitimate client
// out; only when every connection is busy does Accept wait for one to close.
type conns struct {
	net.Listener
	max int

	mu      sync.Mutex
	changed *sync.Cond // signalled when a connection closes or stops being busy
	open    []*conn    // in accept order
	closed  bool       // the listener is closed: Accept's wait ends
	// stopping: the server shuts down; a connection that is not busy, or starts reading a
	// body, is closed at once.
	stopping bool
}

func limitConns(ln net.Listener, max int) *conns {
	l := &conns{Listener: ln, max: max}
	l.changed = sync.NewCond(&l.mu)
	return l
}

// conn is one accepted connection.
type conn struct {
	net.Conn
	l    *conns
	once sync.Once
	// busy and reading are guarded by l.mu. reading: the handler is reading the request
	// body (an upload); a shutdown drops such a connection rather than wait for a slow client.
	busy, reading bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		for i, o := range l.open {
			if o == c {
				l.open = append(l.open[:i], l.open[i+1:]...)
				break
			}
		}
		l.changed.Broadcast()
		l.mu.Unlock()
	})
	return err
}

func (l *conns) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc, l: l}
	l.mu.Lock()
	for len(l.open) >= l.max && !l.closed {
		victim := l.idleLocked()
		if victim == nil {
			l.changed.Wait()
			continue
		}
		// Close outside the lock: Close takes it to forget the connection.
		l.mu.Unlock()
		victim.Close()
		l.mu.Lock()
	}
	if l.closed || l.stopping {
		l.mu.Unlock()
		nc.Close()
		return nil, net.ErrClosed
	}
	l.open = append(l.open, c)
	l.mu.Unlock()
	return c, nil
}

func (l *conns) Close() error {
	l.mu.Lock()
	l.closed = true
	l.changed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// idleLocked returns the oldest connection that is not busy, or nil.
func (l *conns) idleLocked() *conn {
	for _, c := range l.open {
		if !c.busy {
			return c
		}
	}
	return nil
}

// shutdown closes every connection that is not busy or is reading a request body, and those
// that start to: what a shutdown need not wait for.
func (l *conns) shutdown() {
	l.mu.Lock()
	l.stopping = true
	var drop []*conn
	for _, c := range l.open {
		if !c.busy || c.reading {
			drop = append(drop, c)
		}
	}
	l.mu.Unlock()
	for _, c := range drop {
		c.Close()
	}
}

// count is the number of open connections.
func (l *conns) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

func (c *conn) setBusy(busy bool) {
	c.l.mu.Lock()
	c.busy = busy
	if !busy {
		c.reading = false
		c.l.changed.Broadcast()
	}
	c.l.mu.Unlock()
}

func (c *conn) setReading(reading bool) {
	c.l.mu.Lock()
	c.reading = reading
	drop := reading && c.l.stopping
	c.l.mu.Unlock()
	if drop {
		c.Close()
	}
}

type connKey struct{}

// connOf returns the connection a request came on (nil for a request that did not come
// through Serve, as in tests calling Handler directly).
func connOf(ctx context.Context) *conn {
	c, _ := ctx.Value(connKey{}).(*conn)
	return c
}
