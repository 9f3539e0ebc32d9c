package redisscreen

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// A bundle runs one script for several keys in one script run: the
// pipeliner's batch of concurrent claims (or completes) costs Redis one
// script start instead of one each, which is most of what a script costs
// it. Each key's operation is the script's own, unchanged, run one after
// the other inside the bundle, which Redis runs atomically as a whole: no
// other command sees a bundle half done. A bundle's keys may lie in
// different hash slots, so bundles are for single-node clients only.

// bundle is the multi-key form of a script taking nargs ARGV per key.
type bundle struct {
	script *redis.Script
	nargs  int
}

// bundleOf wraps src (a script on KEYS[1] and ARGV[1..nargs]) as a
// function applied to each key with its own slice of ARGV, after the
// count ARGV[1]. It returns the replies in the keys' order.
func bundleOf(src string, nargs int) *bundle {
	return &bundle{nargs: nargs, script: redis.NewScript(fmt.Sprintf(`
local function one(KEYS, ARGV)
%s
end
local n, out = tonumber(ARGV[1]), {}
for i = 1, #KEYS do
  local a = {}
  for j = 1, n do
    a[j] = ARGV[1 + (i - 1) * n + j]
  end
  out[i] = one({KEYS[i]}, a)
end
return out
`, src))}
}

// bundles are the bundled forms of the pipelined scripts.
var bundles = map[*redis.Script]*bundle{
	claimScript:    bundleOf(claimSrc, 4),
	completeScript: bundleOf(completeSrc, 5),
	peekScript:     bundleOf(peekSrc, 0),
}

// args flattens the calls' arguments behind the count.
func (b *bundle) args(calls []*scriptCall) (keys []string, args []any) {
	keys = make([]string, 0, len(calls))
	args = make([]any, 1, 1+len(calls)*b.nargs)
	args[0] = b.nargs
	for _, c := range calls {
		keys = append(keys, c.keys[0])
		args = append(args, c.args...)
	}
	return keys, args
}

// split hands each call its own reply from the bundle's v.
func (b *bundle) split(calls []*scriptCall, v any) error {
	replies, ok := v.([]any)
	if !ok || len(replies) != len(calls) {
		return fmt.Errorf("%w: bundle of %d replied %T of %d", errCorrupt, len(calls), v, len(replies))
	}
	for i, c := range calls {
		c.done <- scriptResult{val: replies[i]}
	}
	return nil
}
