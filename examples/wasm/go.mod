module github.com/wasmstream/wasmstream/examples/wasm

go 1.24

require (
	github.com/wasmstream/wasmstream/abi v0.0.0
	github.com/wasmstream/wasmstream/guest-sdk/go v0.0.0
)

replace (
	github.com/wasmstream/wasmstream/abi => ../../abi
	github.com/wasmstream/wasmstream/guest-sdk/go => ../../guest-sdk/go
)
