package verify_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/hookstamp/hookstamp/internal/verify"
)

// A route's verifier is built once from its options and asked about every
// delivery; a rejection carries a reason that is safe to send back.
func ExampleNew() {
	v, err := verify.New(verify.Options{Scheme: verify.SchemeGitHub, Secrets: []string{"It's a Secret to Everybody"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	genuine := verify.MapRequest{
		Headers: http.Header{"X-Hub-Signature-256": {"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}},
		Payload: []byte("Hello, World!"),
	}
	fmt.Println(v.Verify(genuine))

	forged := verify.MapRequest{Headers: genuine.Headers, Payload: []byte("Hello, World?")}
	err = v.Verify(forged)
	var ve *verify.Error
	fmt.Println(errors.Is(err, verify.ErrUnverified), errors.As(err, &ve) && ve.Reason == "no signature matched")
	fmt.Println(err)
	// Output:
	// <nil>
	// true true
	// unverified: no signature matched
}
