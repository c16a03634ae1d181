package openai

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

//go:embed schema_chat_request.json
var chatRequestSchema []byte

//go:embed schema_responses_request.json
var responsesRequestSchema []byte

// compile compiles a generated schema once, on first use.
func compile(name string, doc []byte) func() (*jsonschema.Schema, error) {
	return sync.OnceValues(func() (*jsonschema.Schema, error) {
		c := jsonschema.NewCompiler()
		c.Draft = jsonschema.Draft2020
		if err := c.AddResource(name, bytes.NewReader(doc)); err != nil {
			return nil, err
		}
		return c.Compile(name)
	})
}

var requestSchemas = map[string]func() (*jsonschema.Schema, error){
	"OaiChatRequest":      compile("chat_request.json", chatRequestSchema),
	"OaiResponsesRequest": compile("responses_request.json", responsesRequestSchema),
}

// decodeRequest strictly decodes body into v (a request type); what the
// generated types cannot check (a member that is text or a list of parts)
// is checked against the request's JSON Schema.
func decodeRequest(body []byte, v any, rule string) error {
	err := cddlrt.DecodeStrictJSON(body, v)
	if err == nil || !errors.Is(err, cddlrt.ErrUnchecked) {
		return err
	}
	s, serr := requestSchemas[rule]()
	if serr != nil {
		return fmt.Errorf("the schema of %s: %w", rule, serr)
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return err
	}
	if err := s.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			leaf := ve
			for len(leaf.Causes) > 0 {
				leaf = leaf.Causes[0]
			}
			return fmt.Errorf("%s: %s", leaf.InstanceLocation, leaf.Message)
		}
		return err
	}
	return json.Unmarshal(body, v)
}
