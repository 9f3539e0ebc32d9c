package extract_test

import (
	"fmt"

	"github.com/hookstamp/hookstamp/internal/extract"
)

func Example() {
	e, err := extract.NewExtractor("orders", []extract.Source{
		{Kind: extract.KindHeader, Arg: "X-Event-Id"},
		{Kind: extract.KindTemplate, Arg: "{json:order_id}-{json:event}-{json:seq}"},
	}, 255)
	if err != nil {
		panic(err)
	}
	r := extract.MapRequest{
		HTTPMethod: "POST",
		Headers:    map[string]string{"Content-Type": "application/json"},
		RawBody:    []byte(`{"order_id":"20260612001","event":"CREATE","seq":"01"}`),
	}
	key, err := e.Key(r, nil)
	fmt.Printf("%s %v\n", key, err)

	r.RawBody = []byte(`{"order_id":"20260612001","event":"CREATE"}`)
	key, err = e.Key(r, nil)
	fmt.Printf("%q %v\n", key, err)

	r.RawBody = []byte(`{"order_id":"20260612001",`)
	key, err = e.Key(r, nil)
	fmt.Printf("%q %v\n", key, err)
	// Output:
	// 20260612001-CREATE-01 <nil>
	// "" <nil>
	// "" malformed JSON body
}
