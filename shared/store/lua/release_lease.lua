-- RELEASE_LEASE: give a lease back if `holder` holds it.
-- KEYS: holder hash. ARGV: holder.
-- Reply: 1 released | 0 not the holder (nothing changed).

if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
