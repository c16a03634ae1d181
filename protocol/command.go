package protocol

// CommandIDOf returns the id of a command variant; ok is false for a
// variant this package does not know (an unknown one decoded raw).
func CommandIDOf(cmd ClientCommandVariant) (id uint64, ok bool) {
	if p := commandIDField(cmd); p != nil {
		return *p, true
	}
	return 0, false
}

// SetCommandID sets the id of a command variant.
func SetCommandID(cmd ClientCommandVariant, id uint64) {
	if p := commandIDField(cmd); p != nil {
		*p = id
	}
}

// commandIDField points at the id of each variant of ClientCommand.
func commandIDField(cmd ClientCommandVariant) *JsUint {
	switch c := cmd.(type) {
	case *ClientCommandRunStart:
		return &c.ID
	case *ClientCommandRunCancel:
		return &c.ID
	case *ClientCommandInputRespond:
		return &c.ID
	case *ClientCommandInputInject:
		return &c.ID
	case *ClientCommandStateGet:
		return &c.ID
	case *ClientCommandStateListCheckpoints:
		return &c.ID
	case *ClientCommandStateFork:
		return &c.ID
	case *ClientCommandAgentGetTree:
		return &c.ID
	case *ClientCommandSubscriptionSubscribe:
		return &c.ID
	case *ClientCommandSubscriptionUnsubscribe:
		return &c.ID
	case *ClientCommandSubscriptionReconnect:
		return &c.ID
	}
	return nil
}
