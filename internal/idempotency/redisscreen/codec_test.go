package redisscreen

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

func TestCodecRoundTrip(t *testing.T) {
	cases := []struct {
		name     string
		e        idempotency.Entry
		keepBody bool
	}{
		{"empty", idempotency.Entry{}, true},
		{"full", idempotency.Entry{
			Response: idempotency.Response{
				Status:  201,
				Headers: map[string]string{"Content-Type": "application/json", "X-Bin": "\x00\xff\r\n", "": ""},
				Body:    []byte("\x00\x01\xfe\xff{}"),
			},
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		}, true},
		{"body dropped", idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("big")}}, false},
		{"body omitted", idempotency.Entry{Response: idempotency.Response{Status: 200, BodyOmitted: true}}, true},
		{"async", idempotency.Entry{Response: idempotency.Response{Status: 202, Body: []byte("ack")}, Async: true}, true},
		{"ack unknown", idempotency.Entry{Response: idempotency.Response{Status: 200, Body: []byte("ok")}, AckUnknown: true}, true},
		{"async ack unknown", idempotency.Entry{Response: idempotency.Response{Status: 0}, Async: true, AckUnknown: true}, true},
		{"long header", idempotency.Entry{Response: idempotency.Response{
			Status: 999, Headers: map[string]string{"Link": strings.Repeat("x", 300)},
		}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeEntry(string(encodeEntry(nil, &c.e, c.keepBody)))
			if err != nil {
				t.Fatal(err)
			}
			want := c.e
			want.BodyCached = c.keepBody
			if !c.keepBody {
				want.Body = nil
			}
			if got.Status != want.Status || !maps.Equal(got.Headers, want.Headers) || !bytes.Equal(got.Body, want.Body) ||
				got.BodyCached != want.BodyCached || got.BodyOmitted != want.BodyOmitted || got.Async != want.Async || got.AckUnknown != want.AckUnknown ||
				got.TraceID != want.TraceID || got.SpanID != want.SpanID {
				t.Fatalf("decoded %+v, want %+v", got, want)
			}
		})
	}
}

func TestCodecRejectsCorrupt(t *testing.T) {
	valid := string(encodeEntry(nil, &idempotency.Entry{Response: idempotency.Response{
		Status: 200, Headers: map[string]string{"A": "b"},
	}, TraceID: "t"}, true))
	cases := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"one byte", "\x01"},
		{"unknown version", "\x02" + valid[1:]},
		{"truncated in headers", valid[:5]},
		{"header count too large", "\x01\x01\xc8\x01\xff\xff\xff\xff\x0f"},
		{"status out of range", "\x01\x01\xe8\x07\x00\x00\x00"},
		{"varint overflow", "\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"},
		{"body without cached flag", "\x01\x00\xc8\x01\x00\x00\x00body"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := decodeEntry(c.in); !errors.Is(err, errCorrupt) {
				t.Fatalf("decodeEntry(%q) = %v, want errCorrupt", c.in, err)
			}
		})
	}
}

// FuzzDecodeEntry: decodeEntry never panics; whatever it accepts encodes
// back to an input it decodes to the same entry.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(string(encodeEntry(nil, &idempotency.Entry{Response: idempotency.Response{
		Status: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: []byte("ok"),
	}, TraceID: "a", SpanID: "b"}, true)))
	f.Add(string(encodeEntry(nil, &idempotency.Entry{Response: idempotency.Response{Status: 202}, Async: true, AckUnknown: true}, false)))
	f.Add("\x01\x02\x00\x00\x00\x00")
	f.Fuzz(func(t *testing.T, in string) {
		e, err := decodeEntry(in)
		if err != nil {
			return
		}
		again, err := decodeEntry(string(encodeEntry(nil, e, e.BodyCached)))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if again.Status != e.Status || !maps.Equal(again.Headers, e.Headers) || !bytes.Equal(again.Body, e.Body) ||
			again.BodyCached != e.BodyCached || again.BodyOmitted != e.BodyOmitted ||
			again.Async != e.Async || again.AckUnknown != e.AckUnknown ||
			again.TraceID != e.TraceID || again.SpanID != e.SpanID {
			t.Fatalf("round trip changed %+v into %+v", e, again)
		}
	})
}

// codecSample is a typical webhook answer: a small JSON body.
func codecSample() *idempotency.Entry {
	return &idempotency.Entry{
		Response: idempotency.Response{
			Status:  200,
			Headers: map[string]string{"Content-Type": "application/json"},
			Body:    bytes.Repeat([]byte(`{"received":true,"id":"evt_1"}`), 18)[:512],
		},
		BodyCached: true,
		TraceID:    "4bf92f3577b34da6a3ce929d0e0e4736",
		SpanID:     "00f067aa0ba902b7",
	}
}

// BenchmarkCodec compares the binary encoding with encoding/json of the
// same entry (size in B/entry).
func BenchmarkCodec(b *testing.B) {
	e := codecSample()
	bin := encodeEntry(nil, e, true)
	js, err := json.Marshal(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("binary/encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeEntry(make([]byte, 0, encodedSize(e)), e, true)
		}
		b.ReportMetric(float64(len(bin)), "B/entry")
	})
	b.Run("binary/decode", func(b *testing.B) {
		s := string(bin)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeEntry(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json/encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(js)), "B/entry")
	})
	b.Run("json/decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got idempotency.Entry
			if err := json.Unmarshal(js, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
