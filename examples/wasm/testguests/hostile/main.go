// Command hostile is a hostile test guest for the sandbox tests: what it does with a record
// depends on the record's value.
//
//	loop       loops forever
//	recurse    recurses forever
//	alloc      allocates 1 GiB
//	emitstorm  emits until the host refuses, then returns the host's error
//	bigemit    emits a 2 MiB value and returns the host's error
//	mibemit    emits a value of 1 MiB (max_value_bytes' default) to output "big" and returns the
//	           host's error
//	statebomb  writes a 2 MiB state value and returns the host's error
//	count      writes state "n" of the record's key, then echoes (a key too long for the store
//	           fails at the host)
//	bigname    writes a state name of 64 KiB, ignores the host's error and echoes
//	manyputs   writes 65000 distinct state names of the record's key, ignoring every error
//	bigemits   emits 3000 values of 1 MiB to output "big", ignoring every error
//	logstorm   logs 200000 lines, then echoes
//	fill<tag>  writes 10000 distinct state names "<tag>.<i>" of the record's key, then echoes
//	probe      tries the WASI capabilities and emits what it got to output "probe", one record
//	           per capability (key file, write, env, args, clock, random, socket); the file it
//	           reads is the value after "probe " ("probe /data/x.txt"), the file it writes is
//	           that path with ".new" appended, the environment variable it looks up is WS_TEST
//	escape     tries to leave the granted directory named after "escape " ("escape /data") and
//	           emits what it got to output "escape", one record per attempt: it makes symlinks
//	           pointing out (up -> ../secret.txt, deep -> ../../../../etc/passwd, abs ->
//	           /etc/passwd, x -> ../x), reads them and a pre-made premade, reads ../secret.txt,
//	           and writes "PWNED" through up and premade and creates x
//	anything else is echoed to output "echo"
//
// With task config {"init":"loop"} or {"init":"alloc"} its init loops forever or allocates 1 GiB.
// With {"tick":"fill"} every partition tick writes 6 state values of 200 KB to key "k" (names
// tick.0 to tick.5) and emits "tick" to output "ticks".
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o hostile.wasm .
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

// sink keeps the compiler from removing the hostile loops.
var (
	sink uint64
	keep []byte
)

func init() {
	wasmstream.HandleInit(func(cfg []byte) error {
		if bytes.Contains(cfg, []byte(`"tick":"fill"`)) {
			wasmstream.HandleTick(fillTick)
		}
		switch {
		case bytes.Contains(cfg, []byte(`"init":"loop"`)):
			spinForever()
		case bytes.Contains(cfg, []byte(`"init":"alloc"`)):
			keep = make([]byte, 1<<30)
		}
		return nil
	})
	wasmstream.Handle(handle)
}

// fillTick writes 1.2 MB of state to key "k".
func fillTick(*wasmstream.Tick) error {
	st := wasmstream.StateOf([]byte("k"))
	for i := range 6 {
		if err := st.Put("tick."+strconv.Itoa(i), make([]byte, 200<<10)); err != nil {
			return err
		}
	}
	return wasmstream.Emit("ticks", []byte("k"), []byte("tick"))
}

func spinForever() {
	for {
		sink = sink*6364136223846793005 + 1
	}
}

//go:noinline
func recurse(n uint64) uint64 { return recurse(n+1) + n }

func handle(r *wasmstream.Record) error {
	v := r.Value()
	emit := func(out, key string, val []byte) error {
		return wasmstream.EmitWith(wasmstream.Output{Name: out, Key: []byte(key), Value: val, Timestamp: r.Timestamp()})
	}
	switch {
	case string(v) == "loop":
		spinForever()
	case string(v) == "recurse":
		sink = recurse(0)
	case string(v) == "alloc":
		keep = make([]byte, 1<<30)
		keep[len(keep)-1] = 1
	case string(v) == "emitstorm":
		for i := 0; ; i++ {
			if err := emit("storm", strconv.Itoa(i), nil); err != nil {
				return err
			}
		}
	case string(v) == "bigemit":
		return emit("big", "k", make([]byte, 2<<20))
	case string(v) == "mibemit":
		return emit("big", "k", make([]byte, 1<<20))
	case string(v) == "statebomb":
		return r.State().Put("bomb", make([]byte, 2<<20))
	case bytes.HasPrefix(v, []byte("escape ")):
		for _, p := range escape(strings.TrimSpace(strings.TrimPrefix(string(v), "escape "))) {
			if err := emit("escape", p[0], []byte(p[1])); err != nil {
				return err
			}
		}
		return nil
	case string(v) == "count":
		if err := r.State().Put("n", []byte("1")); err != nil {
			return err
		}
	case string(v) == "bigname":
		_ = r.State().Put(strings.Repeat("n", 64<<10), []byte("x"))
	case string(v) == "manyputs":
		for i := range 65000 {
			_ = r.State().Put("n"+strconv.Itoa(i), []byte("0123456789"))
		}
		return nil
	case string(v) == "bigemits":
		big := make([]byte, 1<<20)
		for i := range 3000 {
			_ = emit("big", strconv.Itoa(i), big)
		}
		return nil
	case bytes.HasPrefix(v, []byte("fill")):
		for i := range 10000 {
			if err := r.State().Put(string(v[4:])+"."+strconv.Itoa(i), []byte("0123456789")); err != nil {
				return err
			}
		}
	case string(v) == "logstorm":
		for i := range 200000 {
			wasmstream.Info("storm " + strconv.Itoa(i))
		}
	case bytes.HasPrefix(v, []byte("probe")):
		path := strings.TrimSpace(strings.TrimPrefix(string(v), "probe"))
		for _, p := range probe(path) {
			if err := emit("probe", p[0], []byte(p[1])); err != nil {
				return err
			}
		}
		return nil
	}
	return emit("echo", string(r.Key()), v)
}

// escape tries to reach files outside the directory dir through symlinks and "..", and says
// what it got for each attempt: "ok: <data>" or "error: <error>".
func escape(dir string) [][2]string {
	res := func(data string, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		return "ok: " + data
	}
	var out [][2]string
	for _, l := range [][2]string{{"up", "../secret.txt"}, {"deep", "../../../../etc/passwd"}, {"abs", "/etc/passwd"}, {"x", "../x"}} {
		out = append(out, [2]string{"symlink " + l[0], res("", os.Symlink(l[1], dir+"/"+l[0]))})
	}
	for _, name := range []string{"up", "deep", "abs", "premade", "../secret.txt"} {
		b, err := os.ReadFile(dir + "/" + name)
		out = append(out, [2]string{"read " + name, res(string(b), err)})
	}
	for _, name := range []string{"up", "premade"} {
		f, err := os.OpenFile(dir+"/"+name, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write([]byte("PWNED"))
			f.Close()
		}
		out = append(out, [2]string{"write " + name, res("", err)})
	}
	out = append(out, [2]string{"create x", res("", os.WriteFile(dir+"/x", []byte("PWNED"), 0o644))})
	return out
}

// probe tries each capability and says what it got: "ok: <data>" or "error: <error>".
func probe(path string) [][2]string {
	res := func(data string, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		return "ok: " + data
	}
	var out [][2]string
	b, err := os.ReadFile(path)
	out = append(out, [2]string{"file", res(string(b), err)})
	err = os.WriteFile(path+".new", []byte("written by the guest"), 0o644)
	out = append(out, [2]string{"write", res("", err)})
	env, ok := os.LookupEnv("WS_TEST")
	if !ok {
		out = append(out, [2]string{"env", res("", errors.New("WS_TEST not set; environment has "+strconv.Itoa(len(os.Environ()))+" variables"))})
	} else {
		out = append(out, [2]string{"env", res(env, nil)})
	}
	out = append(out, [2]string{"args", res(strconv.Itoa(len(os.Args)), nil)})
	out = append(out, [2]string{"clock", res(strconv.FormatInt(time.Now().UnixNano(), 10), nil)})
	rb := make([]byte, 16)
	_, err = rand.Read(rb)
	out = append(out, [2]string{"random", res(hex.EncodeToString(rb), err)})
	var fd int32
	errno := sockAccept(3, 0, &fd)
	if errno == 0 {
		out = append(out, [2]string{"socket", res("accepted fd "+strconv.Itoa(int(fd)), nil)})
	} else {
		out = append(out, [2]string{"socket", res("", errors.New("errno "+strconv.Itoa(int(errno))))})
	}
	return out
}
