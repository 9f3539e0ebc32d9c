//go:build race

package chaos_test

// raceBuild: the tests run with -race, so the gateways are built with it
// too (their packages are already compiled that way for their own tests).
const raceBuild = true
