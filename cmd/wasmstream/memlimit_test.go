package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimit reads the limit of cgroup v2 and v1 layouts, at the process's own
// cgroup and at the root, and reads "no limit" as 0.
func TestCgroupMemoryLimit(t *testing.T) {
	cases := []struct {
		name  string
		self  string            // /proc/self/cgroup
		files map[string]string // under the cgroup root
		want  int64
		file  string
	}{
		{"v2 own cgroup", "0::/system.slice/ws.service\n",
			map[string]string{"system.slice/ws.service/memory.max": "2147483648\n", "memory.max": "max\n"}, 2147483648, "system.slice/ws.service/memory.max"},
		{"v2 container root", "0::/\n", map[string]string{"memory.max": "1073741824\n"}, 1 << 30, "memory.max"},
		{"v2 no limit", "0::/\n", map[string]string{"memory.max": "max\n"}, 0, "memory.max"},
		{"v1 own cgroup", "12:cpu,cpuacct:/x\n11:memory:/docker/abc\n",
			map[string]string{"memory/docker/abc/memory.limit_in_bytes": "536870912\n"}, 512 << 20, "memory/docker/abc/memory.limit_in_bytes"},
		{"v1 mounted as the container's", "11:memory:/docker/abc\n",
			map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20, "memory/memory.limit_in_bytes"},
		{"v1 no limit", "11:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, "memory/memory.limit_in_bytes"},
		{"nothing mounted", "0::/\n", nil, 0, ""},
		{"garbage", "0::/\n", map[string]string{"memory.max": "lots\n"}, 0, "memory.max"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			self := filepath.Join(dir, "self")
			if err := os.WriteFile(self, []byte(c.self), 0o644); err != nil {
				t.Fatal(err)
			}
			for name, content := range c.files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, file := cgroupMemoryLimit(root, self)
			wantFile := ""
			if c.file != "" {
				wantFile = filepath.Join(root, c.file)
			}
			if got != c.want || file != wantFile {
				t.Errorf("cgroupMemoryLimit = %d from %q, want %d from %q", got, file, c.want, wantFile)
			}
		})
	}
}
