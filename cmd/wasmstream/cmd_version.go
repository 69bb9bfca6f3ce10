package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/wasmstream/wasmstream/abi"
)

func newVersionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the wasmstream version, the ABI version it speaks and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(stdout, "wasmstream %s\nabi %s (%s)\ngo %s %s/%s\n",
				buildVersion(), abi.VersionString(abi.Version), abi.ModuleName,
				runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if err != nil {
				return failure(err)
			}
			return nil
		},
	}
}

// buildVersion is version, or when it was not set with -ldflags, the module version go
// install recorded, if any.
func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}
