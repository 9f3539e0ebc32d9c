package idempotency_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

func TestStorableHeader(t *testing.T) {
	in := http.Header{
		"Content-Type":        {"application/json"},
		"Stripe-Signature":    {"t=1,v1=abc"},
		"Authorization":       {"Bearer secret"},
		"Cookie":              {"session=1"},
		"Proxy-Authorization": {"Basic eA=="},
		"Connection":          {"keep-alive, X-Hop"},
		"X-Hop":               {"1"},
		"Keep-Alive":          {"timeout=5"},
		"Transfer-Encoding":   {"chunked"},
		"x-lower":             {"a"},
		"X-Lower":             {"b"},
	}
	got := idempotency.StorableHeader(in)
	want := http.Header{
		"Content-Type":     {"application/json"},
		"Stripe-Signature": {"t=1,v1=abc"},
	}
	// Both spellings of one name end up under the canonical one; map
	// order decides which comes first.
	lower := got["X-Lower"]
	delete(got, "X-Lower")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StorableHeader = %v, want %v", got, want)
	}
	if len(lower) != 2 {
		t.Errorf("X-Lower = %q, want both values", lower)
	}
	if in.Get("Authorization") == "" {
		t.Error("StorableHeader changed its argument")
	}
}
