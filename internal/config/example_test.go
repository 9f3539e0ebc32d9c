package config_test

import (
	"fmt"

	"github.com/hookstamp/hookstamp/internal/config"
)

func ExampleLoadFromBytes() {
	c, err := config.LoadFromBytes([]byte(`
routes:
  - name: stripe
    path: /webhooks/stripe
    preset: stripe
    upstream: {url: "http://127.0.0.1:9000/billing/stripe"}
    verify: {secrets: ["${STRIPE_WEBHOOK_SECRET}"]}
`), []string{"STRIPE_WEBHOOK_SECRET=whsec_test", "HOOKSTAMP_STORE__DSN=/var/lib/hookstamp.db"})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := c.Routes[0]
	fmt.Println(c.Store.DSN)
	fmt.Println(r.Key.Sources[0].Kind, r.Key.Sources[0].Arg, r.Verify.Scheme, r.Retention)
	fmt.Println(c.Redacted().Routes[0].Verify.Secrets[0])
	// Output:
	// /var/lib/hookstamp.db
	// json id stripe 96h0m0s
	// [redacted]
}

func ExampleLoadFromBytes_errors() {
	_, err := config.LoadFromBytes([]byte(`
routes:
  - name: Orders
    path: /orders
    upstream: {url: "http://127.0.0.1:9000/orders"}
    key: {sources: [{jsn: id}]}
`), nil)
	fmt.Println(err)
	// Output:
	// routes[0].name: "Orders" is not a valid route name (want 1 to 64 of a-z, 0-9, _ and -)
	// routes[0].key.sources[0]: unknown source "jsn" (want header, json, form, query, template, body_hash or fields_hash)
}
