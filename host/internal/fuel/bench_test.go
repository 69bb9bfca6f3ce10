package fuel

import (
	"os"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// BenchmarkInstrument meters a standard Go guest (one dispatch loop per function) and a Rust
// guest (plain loops, the counter cached in a local).
func BenchmarkInstrument(b *testing.B) {
	for _, g := range []struct {
		name  string
		build func(testing.TB) string
	}{
		{"go-wordcount", func(tb testing.TB) string { return guestbuild.Go(tb, "wordcount") }},
		{"rust-wordcount", func(tb testing.TB) string { return guestbuild.Rust(tb, "wordcount-rust") }},
	} {
		b.Run(g.name, func(b *testing.B) {
			wasm, err := os.ReadFile(g.build(b))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(wasm)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Instrument(wasm, Options{Initial: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
