package config

import (
	"reflect"
	"testing"
)

// A preset's final statuses fill record.statuses only when the route
// lists none; the rest of record stays the route's or the default.
func TestPresetRecordStatuses(t *testing.T) {
	const head = "routes:\n  - name: p\n    path: /p\n    upstream: {url: 'http://127.0.0.1:9000/p'}\n"
	wechat := "    preset: wechatpay\n    verify: {public_key: '" + testPublicKey(t) + "'}\n"
	tests := []struct {
		name, doc string
		want      Record
	}{
		{"wechatpay", wechat, Record{Statuses: []string{"2xx"}}},
		{"paypal", "    preset: paypal\n", Record{Statuses: []string{"2xx"}}},
		{"the route's statuses win", wechat + "    record: {statuses: [2xx, 4xx]}\n", Record{Statuses: []string{"2xx", "4xx"}}},
		{"the route's other record keys keep the preset's statuses", wechat + "    record: {headers: [X-Receipt]}\n",
			Record{Statuses: []string{"2xx"}, Headers: []string{"X-Receipt"}}},
		{"stripe keeps the default", "    preset: stripe\n    verify: {secrets: [whsec_x]}\n", Record{Statuses: []string{"2xx", "4xx"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustLoad(t, head+tt.doc).Routes[0].Record
			want := DefaultRoute().Record
			want.Statuses = tt.want.Statuses
			if tt.want.Headers != nil {
				want.Headers = tt.want.Headers
			}
			if !reflect.DeepEqual(r, want) {
				t.Errorf("record = %#v, want %#v", r, want)
			}
		})
	}
	ps := Presets()
	for i := range ps {
		if ps[i].Name == "wechatpay" && len(ps[i].RecordStatuses) > 0 {
			ps[i].RecordStatuses[0] = "4xx"
		}
	}
	if p, _ := LookupPreset("wechatpay"); !reflect.DeepEqual(p.RecordStatuses, []string{"2xx"}) {
		t.Fatalf("wechatpay's record statuses are %v after a change to a copy, want [2xx]", p.RecordStatuses)
	}
}
