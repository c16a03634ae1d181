package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"

	"github.com/redis/rueidis"
)

// appendScript adds a run of one thread's events to its stream and
// publishes each on the thread's sharded channel, in one command: the
// event's bytes cross the network once, the publish costs no command of
// its own, and an event is published only once the stream holds it,
// in the round trip that stores it (a following node hears of it as soon
// as the writing node does).
//
// KEYS[1] is the stream. ARGV[1] is the channel to publish on, empty for
// none: it carries the thread's hash tag, so it is in the stream's slot,
// and it is not declared as a key, since a key that never exists would
// have a migrating slot refuse the script (TRYAGAIN) until the migration
// ends. ARGV[2] is the events' src field, empty for none; then come four
// arguments per event: its entry id, the MINID mode (~ or =), the MINID,
// and its JSON. It returns one string per event tried: empty when the
// stream took it, else the error of its XADD. An id already taken (this
// very event, sent before and taken, or another writer's) does not stop
// the rest; any other error does, and the events after it are not tried
// (the reply is shorter than the run).
const appendScript = `
local out = {}
local src = ARGV[2]
for i = 3, #ARGV, 4 do
  local r
  if src ~= '' then
    r = redis.pcall('XADD', KEYS[1], 'MINID', ARGV[i + 1], ARGV[i + 2], ARGV[i], 'e', ARGV[i + 3], 'src', src)
  else
    r = redis.pcall('XADD', KEYS[1], 'MINID', ARGV[i + 1], ARGV[i + 2], ARGV[i], 'e', ARGV[i + 3])
  end
  if type(r) == 'table' and r.err then
    out[#out + 1] = r.err
    if not string.find(r.err, 'equal or smaller', 1, true) then
      return out
    end
  else
    out[#out + 1] = ''
    if ARGV[1] ~= '' then
      redis.call('SPUBLISH', ARGV[1], ARGV[i + 3])
    end
  end
end
return out`

// shaOf is a script's SHA1, for EVALSHA.
func shaOf(script string) string {
	h := sha1.Sum([]byte(script))
	return hex.EncodeToString(h[:])
}

var (
	appendSHA   = shaOf(appendScript)
	producedSHA = shaOf(producedScript)
)

// isNoScript reports whether err is EVALSHA's refusal of a script the
// Redis does not hold (restarted, flushed, or another shard).
func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

// idTaken reports whether msg, an XADD's error, refuses an id not above
// the stream's last.
func idTaken(msg string) bool {
	return strings.Contains(msg, "equal or smaller than the target stream top item")
}

// transientMsg reports whether msg, a Redis error, may not recur if the
// command is sent again (see isTransient).
func transientMsg(msg string) bool {
	for _, p := range []string{"LOADING", "BUSY", "OOM", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// scriptError is the error of one command a script ran (appendScript's
// reply names it for each event).
type scriptError string

func (e scriptError) Error() string { return string(e) }
