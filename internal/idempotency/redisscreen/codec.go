package redisscreen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// The response of a done entry is stored as one opaque field that only Go
// reads (the Lua scripts never look inside):
//
//	version  byte (codecVersion)
//	flags    byte (flagBodyCached | flagBodyOmitted | flagAsync | flagAckUnknown)
//	status   uvarint
//	headers  uvarint count, then per header: uvarint len, name, uvarint len, value
//	trace id uvarint len, bytes
//	span id  uvarint len, bytes
//	body     the rest, raw
//
// It is smaller and faster than encoding/json, which base64s the body. The
// fingerprint is a field of its own: in-flight entries carry it too.
const codecVersion = 1

const (
	flagBodyCached = 1 << iota
	flagBodyOmitted
	// flagAsync: an async delivery's entry (Entry.Async), which a
	// synchronous route must not replay. An older replica ignores it.
	flagAsync
	// flagAckUnknown: the entry's record was written by a release that
	// did not record whether its provider was acknowledged
	// (Entry.AckUnknown). An older replica ignores it; an entry written
	// without it reads as known.
	flagAckUnknown
)

var errCorrupt = errors.New("corrupt screen entry")

// encodeEntry appends the encoding of e to dst. The body is written only
// when keepBody is true.
func encodeEntry(dst []byte, e *idempotency.Entry, keepBody bool) []byte {
	var flags byte
	if keepBody {
		flags |= flagBodyCached
	}
	if e.BodyOmitted {
		flags |= flagBodyOmitted
	}
	if e.Async {
		flags |= flagAsync
	}
	if e.AckUnknown {
		flags |= flagAckUnknown
	}
	dst = append(dst, codecVersion, flags)
	dst = binary.AppendUvarint(dst, uint64(e.Status))
	dst = binary.AppendUvarint(dst, uint64(len(e.Headers)))
	for k, v := range e.Headers {
		dst = appendString(dst, k)
		dst = appendString(dst, v)
	}
	dst = appendString(dst, e.TraceID)
	dst = appendString(dst, e.SpanID)
	if keepBody {
		dst = append(dst, e.Body...)
	}
	return dst
}

// encodedSize is an upper bound of the encoding's length, to size the
// buffer once.
func encodedSize(e *idempotency.Entry) int {
	n := 2 + 2*binary.MaxVarintLen64 + len(e.Body) + 2*binary.MaxVarintLen64 + len(e.TraceID) + len(e.SpanID)
	for k, v := range e.Headers {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	return n
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// decodeEntry parses an encoding made by encodeEntry. It never panics on
// malformed input: it returns errCorrupt.
func decodeEntry(s string) (*idempotency.Entry, error) {
	d := decoder{s: s}
	if len(s) < 2 {
		return nil, fmt.Errorf("%w: %d bytes", errCorrupt, len(s))
	}
	if s[0] != codecVersion {
		return nil, fmt.Errorf("%w: version %d", errCorrupt, s[0])
	}
	flags := s[1]
	d.pos = 2
	e := &idempotency.Entry{
		BodyCached: flags&flagBodyCached != 0,
	}
	e.BodyOmitted = flags&flagBodyOmitted != 0
	e.Async = flags&flagAsync != 0
	e.AckUnknown = flags&flagAckUnknown != 0
	status := d.uvarint()
	if status > 999 {
		d.fail()
	}
	e.Status = int(status)
	n := d.uvarint()
	if n > uint64(len(s)) { // each header takes at least two bytes
		d.fail()
	}
	if n > 0 && d.err == nil {
		e.Headers = make(map[string]string, n)
		for range n {
			k := d.string()
			v := d.string()
			if d.err != nil {
				break
			}
			e.Headers[k] = v
		}
	}
	e.TraceID = d.string()
	e.SpanID = d.string()
	if d.err != nil {
		return nil, d.err
	}
	if rest := s[d.pos:]; len(rest) > 0 {
		if !e.BodyCached {
			return nil, fmt.Errorf("%w: body without the cached flag", errCorrupt)
		}
		e.Body = []byte(rest)
	}
	return e, nil
}

type decoder struct {
	s   string
	pos int
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or malformed at byte %d", errCorrupt, d.pos)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	var v uint64
	var shift uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if d.pos >= len(d.s) {
			d.fail()
			return 0
		}
		b := d.s[d.pos]
		d.pos++
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				d.fail()
				return 0
			}
			return v | uint64(b)<<shift
		}
		v |= uint64(b&0x7f) << shift
		shift += 7
	}
	d.fail()
	return 0
}

// string copies the bytes out, so that a small header does not keep the
// whole reply (body included) alive.
func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.s)-d.pos) {
		d.fail()
		return ""
	}
	v := strings.Clone(d.s[d.pos : d.pos+int(n)])
	d.pos += int(n)
	return v
}
