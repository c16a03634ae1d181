package redisstore

// SlotOf is slotOf, for the external tests.
var SlotOf = slotOf
