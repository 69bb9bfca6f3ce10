module example.com/goguest

go 1.24

require github.com/wasmstream/wasmstream/abi v0.0.0

replace github.com/wasmstream/wasmstream/abi => ../../../../../abi
