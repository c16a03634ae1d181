package stream

import "github.com/agentstream/agentstream/runtime/cddlrt"

// JSONAppender is a payload that writes its own JSON. Publishing a custom
// event ([RunContext.Custom]) whose payload is one calls AppendJSON
// instead of encoding/json, whose reflection is most of what publishing a
// small event costs (the generated encoders, protocol's AppendJSON, look
// for the method). AppendJSON must append exactly one compact, valid JSON
// value, the same as json.Marshal would make of the payload (that is not
// checked); the built-in firehose's payload is one.
type JSONAppender = cddlrt.JSONAppender

// AppendJSONString appends s as a JSON string, escaped exactly as
// encoding/json escapes it: for a [JSONAppender]'s strings.
func AppendJSONString(b []byte, s string) []byte { return cddlrt.AppendString(b, s) }
