package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/wasmstream/wasmstream/host"
)

// missingFiles reports every file the configuration names that is missing (or, for a file
// input, not a regular file: a pipe cannot be resumed at a byte position), each as a
// *host.ConfigError naming its key, all at once and without compiling anything: the tasks'
// file inputs and the Kafka TLS files, and with modules the tasks' module files (run leaves
// those to the host: a task may run a deployed version whatever its file holds). rename maps a
// key to how the user spelled it (nil: unchanged).
func missingFiles(c host.Config, modules bool, rename func(string) string) []error {
	var errs []error
	need := func(key, path string, seekable bool) {
		if path == "" {
			return
		}
		st, err := os.Stat(path)
		problem := ""
		switch {
		case errors.Is(err, fs.ErrNotExist):
			problem = fmt.Sprintf("%s: no such file", path)
		case err != nil:
			problem = fmt.Sprintf("%s: %v", path, errors.Unwrap(err))
		case st.IsDir():
			problem = fmt.Sprintf("%s is a directory, not a file", path)
		case seekable && !st.Mode().IsRegular():
			problem = fmt.Sprintf("%s is not a regular file (a pipe or a device, such as <(zcat f.gz)): a file input resumes at a byte position after a restart; feed a stream on stdin instead (--input -, or type: stdin)", path)
		default:
			return
		}
		if rename != nil {
			key = rename(key)
		}
		errs = append(errs, &host.ConfigError{Key: key, Problem: problem})
	}
	if c.Kafka.TLS.Enable {
		need("kafka.tls.ca_file", c.Kafka.TLS.CAFile, false)
		need("kafka.tls.cert_file", c.Kafka.TLS.CertFile, false)
		need("kafka.tls.key_file", c.Kafka.TLS.KeyFile, false)
	}
	for i, t := range c.Tasks {
		if modules {
			need(fmt.Sprintf("tasks[%d].module", i), t.Module, false)
		}
		for j, in := range t.Inputs {
			if in.Type == "" || in.Type == host.InputFile {
				need(fmt.Sprintf("tasks[%d].inputs[%d].path", i, j), in.Path, true)
			}
		}
	}
	return errs
}

// checkFiles is missingFiles as the error of a command: a configuration error (exit 2) that
// lists every missing file, or nil.
func checkFiles(s settings, modules bool) error {
	var rename func(string) string
	if s.File == "" {
		rename = quickKey // the task was given by --module and --input
	}
	if errs := missingFiles(s.Host, modules, rename); len(errs) > 0 {
		return &exitError{code: exitUsage, err: &configErrors{file: s.File, errs: errs}}
	}
	return nil
}
