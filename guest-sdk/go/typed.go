package wasmstream

import (
	"errors"
	"math"
	"strconv"
)

// Typed state: values, counters, maps and lists stored in a key's state (ABI.md §4) with a fixed,
// documented byte encoding that the Rust SDK shares, so a task can be ported between the two and a
// test can read what a task wrote.
//
// Encodings (all integers little-endian, like the ABI):
//
//	Codec           value bytes
//	Int64Codec      8 bytes, two's complement i64
//	Uint64Codec     8 bytes, u64
//	Float64Codec    8 bytes, the IEEE 754 bits of an f64
//	BoolCodec       1 byte, 0 or 1
//	StringCodec     the UTF-8 bytes as they are
//	BytesCodec      the bytes as they are
//
//	Helper          state names it uses
//	Value[T]        name = Codec's bytes
//	Counter         name = 8-byte i64 (Int64Codec); missing means 0
//	Map[V]          name + "/" + entry key = Codec's bytes, one state entry per map entry
//	List[V]         name = 8-byte u64 next index (the number of appends, Uint64Codec), and
//	                name + "/" + 16 lowercase hex digits of the index = Codec's bytes, so a scan
//	                lists the items in append order
//
// Give each helper its own name, and avoid a name that is another's name + "/" + something: a Map
// or List named "m" owns every state name starting with "m/".

// Store is the state the typed helpers read and write. State implements it, and so does the
// read-only view wasmstreamtest.Host.Read gives a test.
type Store interface {
	Get(name string) ([]byte, bool, error)
	Put(name string, value []byte) error
	Delete(name string) error
	Scan(prefix string, fn func(name, value []byte) bool) error
}

// Codec converts a T to and from the bytes of a state value.
type Codec[T any] interface {
	// Append appends the encoding of v to dst.
	Append(dst []byte, v T) []byte
	// Decode decodes b, which it must not keep.
	Decode(b []byte) (T, error)
}

// The codecs of the encodings table above.
var (
	Int64Codec   Codec[int64]   = int64Codec{}
	Uint64Codec  Codec[uint64]  = uint64Codec{}
	Float64Codec Codec[float64] = float64Codec{}
	BoolCodec    Codec[bool]    = boolCodec{}
	StringCodec  Codec[string]  = stringCodec{}
	BytesCodec   Codec[[]byte]  = bytesCodec{}
)

type int64Codec struct{}

func (int64Codec) Append(dst []byte, v int64) []byte { return appendU64(dst, uint64(v)) }
func (int64Codec) Decode(b []byte) (int64, error) {
	u, err := decodeU64(b, "i64")
	return int64(u), err
}

type uint64Codec struct{}

func (uint64Codec) Append(dst []byte, v uint64) []byte { return appendU64(dst, v) }
func (uint64Codec) Decode(b []byte) (uint64, error)    { return decodeU64(b, "u64") }

type float64Codec struct{}

func (float64Codec) Append(dst []byte, v float64) []byte { return appendU64(dst, math.Float64bits(v)) }
func (float64Codec) Decode(b []byte) (float64, error) {
	u, err := decodeU64(b, "f64")
	return math.Float64frombits(u), err
}

type boolCodec struct{}

func (boolCodec) Append(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}
func (boolCodec) Decode(b []byte) (bool, error) {
	if len(b) != 1 || b[0] > 1 {
		return false, errors.New("wasmstream: state value is not a bool (1 byte, 0 or 1): " + strconv.Itoa(len(b)) + " bytes")
	}
	return b[0] == 1, nil
}

type stringCodec struct{}

func (stringCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }
func (stringCodec) Decode(b []byte) (string, error)    { return string(b), nil }

type bytesCodec struct{}

func (bytesCodec) Append(dst []byte, v []byte) []byte { return append(dst, v...) }
func (bytesCodec) Decode(b []byte) ([]byte, error)    { return append([]byte{}, b...), nil }

func appendU64(dst []byte, u uint64) []byte {
	return append(dst, byte(u), byte(u>>8), byte(u>>16), byte(u>>24),
		byte(u>>32), byte(u>>40), byte(u>>48), byte(u>>56))
}

func decodeU64(b []byte, what string) (uint64, error) {
	if len(b) != 8 {
		return 0, errors.New("wasmstream: state value is not an " + what + " (8 bytes little-endian): " +
			strconv.Itoa(len(b)) + " bytes")
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56, nil
}

// valBuf is the reusable encoding buffer of the typed helpers (the host copies what it is given).
var valBuf []byte

// named wraps a decoding error with the state name it came from.
func named(name string, err error) error {
	return errors.New("wasmstream: state " + strconv.Quote(name) + ": " + trimPrefix(err.Error()))
}

func trimPrefix(s string) string {
	const p = "wasmstream: "
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// Value is one typed state entry, e.g.
//
//	var last = wasmstream.Value[float64]{Name: "last", Codec: wasmstream.Float64Codec}
type Value[T any] struct {
	Name  string
	Codec Codec[T]
}

// Get returns the value and whether it exists; a stored value the codec cannot decode is an
// error naming the entry.
func (v Value[T]) Get(st Store) (T, bool, error) {
	var zero T
	b, ok, err := st.Get(v.Name)
	if err != nil || !ok {
		return zero, false, err
	}
	x, err := v.Codec.Decode(b)
	if err != nil {
		return zero, false, named(v.Name, err)
	}
	return x, true, nil
}

// Set stores x.
func (v Value[T]) Set(st Store, x T) error {
	valBuf = v.Codec.Append(valBuf[:0], x)
	return st.Put(v.Name, valBuf)
}

// Delete removes the value.
func (v Value[T]) Delete(st Store) error { return st.Delete(v.Name) }

// Counter is an i64 counter under one state name (8 bytes little-endian); a missing counter is 0.
type Counter struct {
	Name string
}

// Get returns the counter (0 when it was never added to).
func (c Counter) Get(st Store) (int64, error) {
	n, _, err := Value[int64]{c.Name, Int64Codec}.Get(st)
	return n, err
}

// Add adds delta (which may be negative; the sum wraps around like Go's int64) and returns the
// new value.
func (c Counter) Add(st Store, delta int64) (int64, error) {
	n, err := c.Get(st)
	if err != nil {
		return 0, err
	}
	n += delta
	return n, Value[int64]{c.Name, Int64Codec}.Set(st, n)
}

// Reset deletes the counter, so it reads 0 again.
func (c Counter) Reset(st Store) error { return st.Delete(c.Name) }

// Map is a map from string keys to typed values, one state entry per map entry named
// Name + "/" + key, e.g.
//
//	var perMerchant = wasmstream.Map[int64]{Name: "merchant", Codec: wasmstream.Int64Codec}
type Map[V any] struct {
	Name  string
	Codec Codec[V]
}

func (m Map[V]) entry(k string) Value[V] { return Value[V]{m.Name + "/" + k, m.Codec} }

// Get returns the value of k and whether there is one.
func (m Map[V]) Get(st Store, k string) (V, bool, error) { return m.entry(k).Get(st) }

// Put sets k to v.
func (m Map[V]) Put(st Store, k string, v V) error { return m.entry(k).Set(st, v) }

// Delete removes k; removing a missing k is not an error.
func (m Map[V]) Delete(st Store, k string) error { return st.Delete(m.Name + "/" + k) }

// Each calls fn for every entry in bytewise ascending key order until fn returns false. fn must
// not change the map (collect first, then change).
func (m Map[V]) Each(st Store, fn func(k string, v V) bool) error {
	prefix := m.Name + "/"
	var derr error
	err := st.Scan(prefix, func(name, value []byte) bool {
		v, err := m.Codec.Decode(value)
		if err != nil {
			derr = named(string(name), err)
			return false
		}
		return fn(string(name[len(prefix):]), v)
	})
	if err != nil {
		return err
	}
	return derr
}

// Clear removes every entry.
func (m Map[V]) Clear(st Store) error { return clearPrefix(st, m.Name+"/") }

// clearPrefix deletes every name that starts with prefix.
func clearPrefix(st Store, prefix string) error {
	var names []string
	if err := st.Scan(prefix, func(name, _ []byte) bool {
		names = append(names, string(name))
		return true
	}); err != nil {
		return err
	}
	for _, n := range names {
		if err := st.Delete(n); err != nil {
			return err
		}
	}
	return nil
}

// List is an append-only list (or bag) of typed items: the state name Name holds the number of
// appends (8-byte u64) and each item is the entry Name + "/" + its index as 16 lowercase hex
// digits, so items list in append order, e.g.
//
//	var amounts = wasmstream.List[float64]{Name: "amounts", Codec: wasmstream.Float64Codec}
type List[V any] struct {
	Name  string
	Codec Codec[V]
}

// itemName is the state name of item i.
func (l List[V]) itemName(i uint64) string {
	const hex = "0123456789abcdef"
	var b [16]byte
	for j := 15; j >= 0; j-- {
		b[j] = hex[i&15]
		i >>= 4
	}
	return l.Name + "/" + string(b[:])
}

// Len returns the number of items.
func (l List[V]) Len(st Store) (uint64, error) {
	n, _, err := Value[uint64]{l.Name, Uint64Codec}.Get(st)
	return n, err
}

// Append adds v at the end.
func (l List[V]) Append(st Store, v V) error {
	n, err := l.Len(st)
	if err != nil {
		return err
	}
	if err := (Value[V]{l.itemName(n), l.Codec}).Set(st, v); err != nil {
		return err
	}
	return Value[uint64]{l.Name, Uint64Codec}.Set(st, n+1)
}

// Get returns item i (0-based) and whether it exists.
func (l List[V]) Get(st Store, i uint64) (V, bool, error) {
	return Value[V]{l.itemName(i), l.Codec}.Get(st)
}

// Each calls fn for every item in append order, with its index, until fn returns false.
func (l List[V]) Each(st Store, fn func(i uint64, v V) bool) error {
	m := Map[V]{l.Name, l.Codec}
	var perr error
	err := m.Each(st, func(k string, v V) bool {
		i, err := strconv.ParseUint(k, 16, 64)
		if err != nil || len(k) != 16 {
			perr = errors.New("wasmstream: state " + strconv.Quote(l.Name+"/"+k) + ": not an item of list " + strconv.Quote(l.Name))
			return false
		}
		return fn(i, v)
	})
	if err != nil {
		return err
	}
	return perr
}

// Items returns every item in append order.
func (l List[V]) Items(st Store) ([]V, error) {
	var out []V
	err := l.Each(st, func(_ uint64, v V) bool {
		out = append(out, v)
		return true
	})
	return out, err
}

// Clear removes every item and the length.
func (l List[V]) Clear(st Store) error {
	if err := clearPrefix(st, l.Name+"/"); err != nil {
		return err
	}
	return st.Delete(l.Name)
}
