package forward_test

import (
	"fmt"

	"github.com/hookstamp/hookstamp/internal/forward"
)

func ExampleJoinURL() {
	// Exact route: the upstream URL itself, with the request's query.
	fmt.Println(forward.JoinURL("http://billing:9000/stripe", "", "livemode=true"))
	// Prefix route "/hooks/*" receiving "/hooks/github/push%2Fevent".
	fmt.Println(forward.JoinURL("http://ci:8080/in/", "/github/push%2Fevent", ""))
	// Output:
	// http://billing:9000/stripe?livemode=true
	// http://ci:8080/in/github/push%2Fevent
}
