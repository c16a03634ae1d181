module github.com/agentstream/agentstream

go 1.26.8

require (
	github.com/fxamacker/cbor/v2 v2.9.6
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/x448/float16 v0.8.4 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
