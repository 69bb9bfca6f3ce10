module github.com/wasmstream/wasmstream/abi

go 1.24
