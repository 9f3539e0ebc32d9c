package verify_test

import (
	"net/url"
	"testing"

	"github.com/hookstamp/hookstamp/internal/verify"
	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// Alipay signs the decoded parameters joined as "k=v&k=v". Anyone holding a
// genuine notification can move a "&name=value" boundary into a value (one
// parameter swallows the next) and keep the signed string, hence the
// signature, unchanged. The result is a body Alipay never sent: a key or a
// fingerprint field of another value, or one missing. It must not verify.
func TestAlipayRejectsRepartitionedParameters(t *testing.T) {
	key := rsaKey(t, "old")
	genuine := must(verifytest.Alipay(key, alipayParams))(t)
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeAlipay, PublicKey: publicKeys(t, "old")})
	if err := v.Verify(verify.MapRequest{Payload: genuine}); err != nil {
		t.Fatalf("genuine notification rejected: %v", err)
	}
	q, err := url.ParseQuery(string(genuine))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		into, absorb string
	}{
		// total_amount swallows trade_no: a fingerprint field changes,
		// another disappears, notify_id (the key) stays.
		{"total_amount swallows trade_no", "total_amount", "trade_no"},
		// notify_id swallows notify_time: the key changes.
		{"notify_id swallows notify_time", "notify_id", "notify_time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forged := url.Values{}
			for k, vs := range q {
				forged[k] = append([]string(nil), vs...)
			}
			forged.Set(tt.into, q.Get(tt.into)+"&"+tt.absorb+"="+q.Get(tt.absorb))
			forged.Del(tt.absorb)
			body := []byte(forged.Encode())
			wantUnverified(t, v.Verify(verify.MapRequest{Payload: body}), "")
		})
	}
}

// The rule that refuses re-cut notifications must let Alipay's own values
// through ("&" not followed by a parameter name and "=") and refuses a
// value or a name that a cut could have made, whoever signed it.
func TestAlipayAmbiguousValuesAndNames(t *testing.T) {
	key := rsaKey(t, "old")
	v := newVerifier(t, verify.Options{Scheme: verify.SchemeAlipay, PublicKey: publicKeys(t, "old")})
	tests := []struct {
		name, param, value string
		ok                 bool
	}{
		{"ampersand before a space", "subject", "Tom & Jerry=1", true},
		{"ampersand without equals", "subject", "R&D", true},
		{"ampersand before a non-name", "subject", "a&-b=c", true},
		{"JSON list", "fund_bill_list", `[{"amount":"20.00","fundChannel":"ALIPAYACCOUNT"}]`, true},
		{"percent-encoded passback", "passback_params", "a%3D1%26b%3D2", true},
		{"ampersand, name, equals", "subject", "Tom&Jerry=1", false},
		{"name with a space", "sub ject", "x", false},
		{"name with an equals sign", "a=b", "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := url.Values{}
			for k, vs := range alipayParams {
				params[k] = vs
			}
			params.Set(tt.param, tt.value)
			err := v.Verify(verify.MapRequest{Payload: must(verifytest.Alipay(key, params))(t)})
			if tt.ok && err != nil {
				t.Fatalf("genuine notification refused: %v", err)
			}
			if !tt.ok {
				wantUnverified(t, err, "could be cut another way")
			}
		})
	}
}
