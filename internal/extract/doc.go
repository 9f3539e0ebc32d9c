// Package extract derives a delivery's identity (its key) and what it means
// (its fingerprint) from the request, as configured by a route's key.sources
// and fingerprint settings (SPEC §1, §3).
//
// It depends on nothing but a small read-only Request view, so it can be
// fuzzed and benchmarked without an HTTP server; ingress adapts Fiber's
// request to it.
//
// Rules a route's author can rely on:
//
//   - Key sources are tried in order and the first one that yields a
//     non-empty value wins; a template yields a value only when every
//     placeholder resolves to a non-empty value.
//   - JSON values (GJSON paths): a string yields its unescaped value, a
//     number its literal text as sent ("1.50" stays "1.50"), true and false
//     yield "true" and "false"; null, objects, arrays and absent paths yield
//     nothing, because none of them is an identifier a provider would send.
//     A string that escapes an unpaired UTF-16 surrogate ("\ud800") is not
//     valid UTF-8 (ErrKeyNotUTF8): decoding would turn every such escape
//     into U+FFFD and make different keys one.
//   - JSON sources read the body whenever it is valid JSON, whatever its
//     Content-Type (providers are not all careful about it). A body that is
//     not valid JSON yields nothing; when its Content-Type claims JSON
//     (application/json or */*+json) and no source yields a key, Key reports
//     ErrMalformedBody instead of "no key", so the provider learns why.
//     Bodies nested deeper than MaxJSONDepth count as not valid JSON: the
//     validator recurses, and depth is the one thing a 1 MiB body could use
//     to make it expensive.
//   - Form sources read the body only when its Content-Type is
//     application/x-www-form-urlencoded (parameters such as charset are
//     ignored); for any other body they yield nothing, so a JSON body that
//     happens to contain "name=" is never misread. A well-formed pair with
//     the name is decoded exactly as net/url.ParseQuery decodes it; pairs
//     that ParseQuery would reject (a bad %-escape, a ';') are skipped, and
//     at most MaxFormFields pairs are looked at.
//   - A header, query parameter or form field the request gives more than
//     once is no key (ErrDuplicateField): the application may read any of
//     its values. As a fingerprint field, each of its values is digested.
//   - Values are used byte for byte: nothing is trimmed or case-folded.
//   - A key must be at most the route's max_length bytes, valid UTF-8 and
//     free of control characters (see ValidateKey); Key checks all three, and
//     stops building a key as soon as it is too long, so a huge placeholder
//     value never costs more memory than max_length.
package extract
